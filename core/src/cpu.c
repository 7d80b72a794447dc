/*
 * CPU evaluation in double precision: the readable specification of the maths.
 *
 * For atom i of element s_i, with neighbours j in the same batch (r_ij = r_j − r_i, d_ij = |r_ij|):
 *   fc(d)      = ½ cos(π d / Rc) + ½  for d ≤ Rc, else 0
 *   radial     G[s_j, η, μ]       += ¼ exp(−η (d_ij − μ)²) fc_Rcr(d_ij)
 *   angular    G[s_j s_k, η, ζ, μ, θs] += 2 ((1 + cos(θ_ijk − θs)) / 2)^ζ
 *                                          · exp(−η ((d_ij + d_ik)/2 − μ)²) fc_Rca(d_ij) fc_Rca(d_ik)
 *              for each unordered neighbour pair j < k, θ_ijk = acos(0.95 cos∠(r_ij, r_ik))
 * (TorchANI's AEV, including its 0.95 factor inside acos and its term ordering.)
 * Atomic energy e_i = network_{s_i}(G_i) (layers W x + b, CELU(α=0.1) on hidden layers),
 * averaged over the ensemble (or one member). Batch energy E_b = Σ_{i∈b} (e_i + self_energy(s_i)).
 * Forces are the analytic −dE/dr: network backprop to dE/dG, then the AEV derivatives.
 */
#include "internal.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#define NNP_PI 3.14159265358979323846
#define CHUNK 32 /* atoms of one element pushed through a network together (weights stay in cache) */

static double cutoff_fn(double d, double rc) { return 0.5 * cos(NNP_PI * d / rc) + 0.5; }
static double cutoff_deriv(double d, double rc) { return -0.5 * NNP_PI / rc * sin(NNP_PI * d / rc); }

/* ------------------------------------------------------------------ input checks */

nnp_status nnp_check_box(const double* box, double cutoff, double to_angstrom) {
    for (int k = 0; k < 9; k++)
        if (!isfinite(box[k])) return nnp_fail(NNP_ERR_NONFINITE, "box vector component %d is not finite", k);
    if (box[1] != 0 || box[2] != 0 || box[5] != 0)
        return nnp_fail(NNP_ERR_BOX, "box must be in reduced form: a = (ax,0,0), b = (bx,by,0), c = (cx,cy,cz)");
    double ax = box[0], by = box[4], cz = box[8];
    if (!(ax > 0 && by > 0 && cz > 0)) return nnp_fail(NNP_ERR_BOX, "box has a non-positive width");
    if (fabs(box[3]) > 0.5 * ax * (1 + 1e-6) || fabs(box[6]) > 0.5 * ax * (1 + 1e-6) ||
        fabs(box[7]) > 0.5 * by * (1 + 1e-6))
        return nnp_fail(NNP_ERR_BOX, "box is not reduced: need |bx|, |cx| <= ax/2 and |cy| <= by/2");
    double min_width = fmin(ax, fmin(by, cz)) * to_angstrom;
    if (min_width < 2 * cutoff)
        return nnp_fail(NNP_ERR_BOX, "periodic box width %g Å is smaller than twice the model's cutoff "
                        "(2 × %g Å); minimum image would miss interactions", min_width, cutoff);
    return NNP_OK;
}

/* ------------------------------------------------------------------ AEV */

/* AEV of atom i: aev has model->aev_length entries, zeroed by the caller. */
static void compute_aev(const nnp_model* model, const nnp_plan* plan, const nnp_neighbors* nl,
                        int32_t i, double* aev) {
    const nnp_aev_params* p = &model->aev;
    const nnp_neighbor* nb = &nl->items[nl->start[i]];
    int32_t nn = nl->start[i + 1] - nl->start[i];
    for (int32_t a = 0; a < nn; a++) {
        double d = nb[a].d, fc = cutoff_fn(d, p->Rcr);
        double* out = aev + plan->elements[nb[a].j] * model->radial_sub;
        for (int32_t e = 0; e < p->nEtaR; e++)
            for (int32_t s = 0; s < p->nShfR; s++) {
                double x = d - p->ShfR[s];
                out[e * p->nShfR + s] += 0.25 * exp(-p->EtaR[e] * x * x) * fc;
            }
    }
    for (int32_t a = 0; a < nn; a++) {
        if (nb[a].d > p->Rca) continue;
        for (int32_t b = a + 1; b < nn; b++) {
            if (nb[b].d > p->Rca) continue;
            const double *u = nb[a].r, *v = nb[b].r;
            double dj = nb[a].d, dk = nb[b].d;
            double c = (u[0] * v[0] + u[1] * v[1] + u[2] * v[2]) / fmax(dj * dk, 1e-10);
            double theta = acos(0.95 * c);
            double fcjk = cutoff_fn(dj, p->Rca) * cutoff_fn(dk, p->Rca);
            double avg = 0.5 * (dj + dk);
            double* out = aev + model->radial_length +
                          model->pair_index[plan->elements[nb[a].j]][plan->elements[nb[b].j]] * model->angular_sub;
            int32_t t = 0;
            for (int32_t ea = 0; ea < p->nEtaA; ea++)
                for (int32_t z = 0; z < p->nZeta; z++)
                    for (int32_t sa = 0; sa < p->nShfA; sa++) {
                        double x = avg - p->ShfA[sa];
                        double f2 = exp(-p->EtaA[ea] * x * x);
                        for (int32_t sz = 0; sz < p->nShfZ; sz++, t++) {
                            double f1 = pow(0.5 * (1 + cos(theta - p->ShfZ[sz])), p->Zeta[z]);
                            out[t] += 2 * f1 * f2 * fcjk;
                        }
                    }
        }
    }
}

/* dE/dr of atom i's AEV, given g = dE/dAEV, into local (Hartree/Å): slot 0 (3 values) for atom i
   itself, slot 1 + a for its neighbour a. local must be zeroed by the caller. */
static void aev_backward(const nnp_model* model, const nnp_plan* plan, const nnp_neighbors* nl,
                         int32_t i, const double* g, double* local) {
    const nnp_aev_params* p = &model->aev;
    const nnp_neighbor* nb = &nl->items[nl->start[i]];
    int32_t nn = nl->start[i + 1] - nl->start[i];
    for (int32_t a = 0; a < nn; a++) {
        double d = nb[a].d, fc = cutoff_fn(d, p->Rcr), dfc = cutoff_deriv(d, p->Rcr);
        const double* gr = g + plan->elements[nb[a].j] * model->radial_sub;
        double s_d = 0; /* dE/dd */
        for (int32_t e = 0; e < p->nEtaR; e++)
            for (int32_t s = 0; s < p->nShfR; s++) {
                double x = d - p->ShfR[s];
                double ex = exp(-p->EtaR[e] * x * x);
                s_d += gr[e * p->nShfR + s] * 0.25 * ex * (-2 * p->EtaR[e] * x * fc + dfc);
            }
        for (int k = 0; k < 3; k++) {
            double f = s_d * nb[a].r[k] / d;
            local[3 * (1 + a) + k] += f;
            local[k] -= f;
        }
    }
    for (int32_t a = 0; a < nn; a++) {
        if (nb[a].d > p->Rca) continue;
        for (int32_t b = a + 1; b < nn; b++) {
            if (nb[b].d > p->Rca) continue;
            const double *u = nb[a].r, *v = nb[b].r;
            double dj = nb[a].d, dk = nb[b].d;
            double denom = fmax(dj * dk, 1e-10);
            double c = (u[0] * v[0] + u[1] * v[1] + u[2] * v[2]) / denom;
            double theta = acos(0.95 * c);
            double fj = cutoff_fn(dj, p->Rca), fk = cutoff_fn(dk, p->Rca);
            double dfj = cutoff_deriv(dj, p->Rca), dfk = cutoff_deriv(dk, p->Rca);
            double avg = 0.5 * (dj + dk);
            const double* ga = g + model->radial_length +
                               model->pair_index[plan->elements[nb[a].j]][plan->elements[nb[b].j]] * model->angular_sub;
            double s_theta = 0, s_dj = 0, s_dk = 0;
            int32_t t = 0;
            for (int32_t ea = 0; ea < p->nEtaA; ea++)
                for (int32_t z = 0; z < p->nZeta; z++)
                    for (int32_t sa = 0; sa < p->nShfA; sa++) {
                        double x = avg - p->ShfA[sa];
                        double f2 = exp(-p->EtaA[ea] * x * x);
                        double df2 = f2 * (-2 * p->EtaA[ea] * x) * 0.5; /* d f2 / d dj = d f2 / d dk */
                        for (int32_t sz = 0; sz < p->nShfZ; sz++, t++) {
                            double base = 0.5 * (1 + cos(theta - p->ShfZ[sz]));
                            double f1 = pow(base, p->Zeta[z]);
                            double df1 = p->Zeta[z] * pow(base, p->Zeta[z] - 1) * (-0.5 * sin(theta - p->ShfZ[sz]));
                            double w = ga[t];
                            s_theta += w * 2 * df1 * f2 * fj * fk;
                            s_dj += w * 2 * f1 * (df2 * fj * fk + f2 * dfj * fk);
                            s_dk += w * 2 * f1 * (df2 * fj * fk + f2 * fj * dfk);
                        }
                    }
            double s_c = s_theta * (-0.95 / sqrt(1 - 0.95 * c * 0.95 * c));
            for (int k = 0; k < 3; k++) {
                double dc_du = v[k] / denom - c * u[k] / (dj * dj);
                double dc_dv = u[k] / denom - c * v[k] / (dk * dk);
                double gu = s_dj * u[k] / dj + s_c * dc_du;
                double gv = s_dk * v[k] / dk + s_c * dc_dv;
                local[3 * (1 + a) + k] += gu;
                local[3 * (1 + b) + k] += gv;
                local[k] -= gu + gv;
            }
        }
    }
}

/* ------------------------------------------------------------------ networks */

/* Activations are stored transposed, feature-major: x[k * CHUNK + a] is feature k of atom a of
   the chunk. The innermost loops then run over the atoms of the chunk, contiguous and independent,
   so they vectorize while every atom's sums keep the plain sequential order (bias, then k = 0, 1, …). */
typedef struct workspace {
    int32_t width;                   /* widest layer or input */
    double* act[NNP_MAX_LAYERS + 1]; /* act[0] = AEVs, act[l+1] = output of layer l; width × CHUNK */
    double* pre[NNP_MAX_LAYERS];     /* pre-activations of layer l */
    double* grad_a;                  /* width × CHUNK */
    double* grad_b;
    double* daev;                    /* width × CHUNK: dE/dAEV of the chunk, all members */
    double* atom;                    /* one atom's AEV or dE/dAEV, width */
} workspace;

static double activate(int32_t kind, double z) {
    if (kind == NNP_ACT_CELU) return z > 0 ? z : NNP_CELU_ALPHA * expm1(z / NNP_CELU_ALPHA);
    return z;
}

static double activate_deriv(int32_t kind, double z) {
    if (kind == NNP_ACT_CELU) return z > 0 ? 1 : exp(z / NNP_CELU_ALPHA);
    return 1;
}

/* Forward pass of n atoms (AEVs in ws->act[0]); returns outputs in out[0..n). */
static void network_forward(const nnp_network* net, workspace* ws, int32_t n, double* out) {
    for (int32_t l = 0; l < net->n_layers; l++) {
        const nnp_layer* layer = &net->layers[l];
        const double* x = ws->act[l];
        double* z = ws->pre[l];
        double* y = ws->act[l + 1];
        for (int32_t o = 0; o < layer->n_out; o++) {
            const float* w = layer->weights + (size_t)o * layer->n_in;
            double* zo = z + (size_t)o * CHUNK;
            for (int32_t a = 0; a < n; a++) zo[a] = layer->biases[o];
            for (int32_t k = 0; k < layer->n_in; k++) {
                const double wk = w[k];
                const double* xk = x + (size_t)k * CHUNK;
                for (int32_t a = 0; a < n; a++) zo[a] += wk * xk[a];
            }
            for (int32_t a = 0; a < n; a++) y[(size_t)o * CHUNK + a] = activate(layer->activation, zo[a]);
        }
    }
    for (int32_t a = 0; a < n; a++) out[a] = ws->act[net->n_layers][a];
}

/* Backward pass after network_forward: adds scale · d(output)/d(AEV) to daev (width × CHUNK). */
static void network_backward(const nnp_network* net, workspace* ws, int32_t n, double scale, double* daev) {
    double* g = ws->grad_a; /* dE/d(output of layer l) */
    double* h = ws->grad_b;
    for (int32_t a = 0; a < n; a++) g[a] = scale;
    for (int32_t l = net->n_layers - 1; l >= 0; l--) {
        const nnp_layer* layer = &net->layers[l];
        const double* z = ws->pre[l];
        double* gin = l == 0 ? daev : h;
        if (l > 0) memset(gin, 0, (size_t)layer->n_in * CHUNK * sizeof(double));
        for (int32_t o = 0; o < layer->n_out; o++) {
            const float* w = layer->weights + (size_t)o * layer->n_in;
            double delta[CHUNK];
            for (int32_t a = 0; a < n; a++)
                delta[a] = g[(size_t)o * CHUNK + a] * activate_deriv(layer->activation, z[(size_t)o * CHUNK + a]);
            for (int32_t k = 0; k < layer->n_in; k++) {
                const double wk = w[k];
                double* gk = gin + (size_t)k * CHUNK;
                for (int32_t a = 0; a < n; a++) gk[a] += delta[a] * wk;
            }
        }
        double* t = g;
        g = h;
        h = t;
    }
}

static void free_workspace(workspace* ws) {
    for (int l = 0; l <= NNP_MAX_LAYERS; l++) free(ws->act[l]);
    for (int l = 0; l < NNP_MAX_LAYERS; l++) free(ws->pre[l]);
    free(ws->grad_a);
    free(ws->grad_b);
    free(ws->daev);
    free(ws->atom);
}

static nnp_status alloc_workspace(const nnp_model* model, workspace* ws) {
    memset(ws, 0, sizeof *ws);
    int32_t width = model->aev_length, layers = 0;
    for (int32_t i = 0; i < model->n_members * model->n_elements; i++) {
        const nnp_network* net = &model->networks[i];
        if (net->n_layers > layers) layers = net->n_layers;
        for (int32_t l = 0; l < net->n_layers; l++)
            if (net->layers[l].n_out > width) width = net->layers[l].n_out;
    }
    ws->width = width;
    size_t bytes = (size_t)CHUNK * (size_t)width * sizeof(double);
    int ok = 1;
    for (int32_t l = 0; l <= layers; l++) ok = ok && (ws->act[l] = calloc(1, bytes)) != NULL;
    for (int32_t l = 0; l < layers; l++) ok = ok && (ws->pre[l] = calloc(1, bytes)) != NULL;
    ok = ok && (ws->grad_a = calloc(1, bytes)) != NULL && (ws->grad_b = calloc(1, bytes)) != NULL &&
         (ws->daev = calloc(1, bytes)) != NULL && (ws->atom = calloc((size_t)width, sizeof(double))) != NULL;
    if (!ok) {
        free_workspace(ws);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory for the network workspace");
    }
    return NNP_OK;
}

/* ------------------------------------------------------------------ evaluation */

/*
 * Work is split into chunks of up to CHUNK atoms of one element, in a fixed order (element, then
 * atom index). Threads take chunks from a shared counter; each chunk writes only its own atoms'
 * energies and its own slots of per-atom force contributions (`local`). The contributions are then
 * added to the forces by one thread in chunk order, so the result is the same for any number of
 * threads, and the same for a molecule alone or among other batches.
 */
typedef struct eval_job {
    const nnp_model* model;
    const nnp_plan* plan;
    const nnp_neighbors* nl;
    const int32_t* order;      /* atoms sorted by element, index order within */
    const nnp_chunk* chunks;
    int32_t n_chunks;
    int32_t m_first, m_last;
    int with_forces;
    double* atom_e;            /* per atom, network energy (Hartree) */
    double* local;             /* per atom i: 3 × (1 + neighbours) values, from local_start[i] */
    const size_t* local_start;
    atomic_int next;
    workspace* ws;             /* one per thread */
} eval_job;

static void run_chunks(eval_job* job, workspace* ws) {
    const nnp_model* model = job->model;
    const size_t A = (size_t)model->aev_length;
    const double scale = 1.0 / (job->m_last - job->m_first);
    double out[CHUNK];
    for (;;) {
        int32_t ci = atomic_fetch_add(&job->next, 1);
        if (ci >= job->n_chunks) break;
        const nnp_chunk* ch = &job->chunks[ci];
        const int32_t* atoms = job->order + ch->first;
        for (int32_t a = 0; a < ch->count; a++) {
            memset(ws->atom, 0, A * sizeof(double));
            compute_aev(model, job->plan, job->nl, atoms[a], ws->atom);
            for (size_t k = 0; k < A; k++) ws->act[0][k * CHUNK + (size_t)a] = ws->atom[k];
        }
        if (job->with_forces) memset(ws->daev, 0, A * CHUNK * sizeof(double));
        for (int32_t m = job->m_first; m < job->m_last; m++) {
            const nnp_network* net = &model->networks[m * model->n_elements + ch->element];
            network_forward(net, ws, ch->count, out);
            for (int32_t a = 0; a < ch->count; a++) job->atom_e[atoms[a]] += out[a] * scale;
            if (job->with_forces) network_backward(net, ws, ch->count, scale, ws->daev);
        }
        if (job->with_forces)
            for (int32_t a = 0; a < ch->count; a++) {
                for (size_t k = 0; k < A; k++) ws->atom[k] = ws->daev[k * CHUNK + (size_t)a];
                aev_backward(model, job->plan, job->nl, atoms[a], ws->atom, job->local + job->local_start[atoms[a]]);
            }
    }
}

typedef struct worker_arg {
    eval_job* job;
    workspace* ws;
} worker_arg;

static void* worker_main(void* arg) {
    worker_arg* w = arg;
    run_chunks(w->job, w->ws);
    return NULL;
}

static int32_t default_threads(void) {
    const char* env = getenv("NNP_NUM_THREADS");
    long n = env && env[0] ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > NNP_MAX_THREADS ? NNP_MAX_THREADS : (int32_t)n;
}

int32_t nnp_plan_threads(const nnp_plan* plan) { return plan->n_threads > 0 ? plan->n_threads : default_threads(); }

nnp_status nnp_plan_set_num_threads(nnp_plan* plan, int32_t n_threads) {
    if (plan == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_plan_set_num_threads: plan is NULL");
    if (n_threads < 0 || n_threads > NNP_MAX_THREADS)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "thread count %d is not in 0..%d", n_threads, NNP_MAX_THREADS);
    plan->n_threads = n_threads;
    return NNP_OK;
}

/* ANI's CPU evaluation (the family's evaluate_cpu): pos and box in Å, energies in Hartree. */
nnp_status nnp_ani_evaluate_cpu(nnp_plan* plan, const double* pos, const double* box, double* atom_energy,
                                double* batch_energy, double* grad_out) {
    (void)batch_energy;
    int32_t n = plan->n_atoms;
    const nnp_model* model = plan->model;
    nnp_neighbors nl = {0};
    nnp_status st = nnp_neighbors_build(plan, pos, box, model->aev.Rcr, &nl);
    if (st != NNP_OK) return st;
    int forces = grad_out != NULL;
    /* Chunks: atoms grouped by element, index order within an element. */
    int32_t n_chunks = 0, filled = 0;
    for (int32_t e = 0; e < model->n_elements; e++) {
        int32_t first = filled;
        for (int32_t i = 0; i < n; i++)
            if (plan->elements[i] == e) plan->by_element[filled++] = i;
        for (int32_t c0 = first; c0 < filled; c0 += CHUNK)
            plan->chunks[n_chunks++] = (nnp_chunk){e, c0, filled - c0 < CHUNK ? filled - c0 : CHUNK};
    }
    int32_t n_threads = nnp_plan_threads(plan);
    if (n_threads > n_chunks) n_threads = n_chunks > 0 ? n_chunks : 1;
    size_t n_local = forces ? 3 * ((size_t)nl.start[n] + (size_t)n) : 0;
    size_t* local_start = forces ? malloc(((size_t)n + 1) * sizeof *local_start) : NULL;
    double* local = forces ? calloc(n_local + 1, sizeof *local) : NULL;
    double* atom_e = calloc((size_t)n + 1, sizeof *atom_e);
    workspace* ws = calloc((size_t)n_threads, sizeof *ws);
    int ok = atom_e && ws && (!forces || (local && local_start));
    for (int32_t t = 0; ok && t < n_threads; t++) ok = alloc_workspace(model, &ws[t]) == NNP_OK;
    if (!ok) {
        for (int32_t t = 0; ws && t < n_threads; t++) free_workspace(&ws[t]);
        free(ws), free(local), free(local_start), free(atom_e);
        nnp_neighbors_free(&nl);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory for %d atoms", n);
    }
    for (int32_t i = 0; forces && i < n; i++) local_start[i] = 3 * ((size_t)nl.start[i] + (size_t)i);

    eval_job job = {.model = model, .plan = plan, .nl = &nl, .order = plan->by_element, .chunks = plan->chunks,
                    .n_chunks = n_chunks, .m_first = plan->member < 0 ? 0 : plan->member,
                    .m_last = plan->member < 0 ? model->n_members : plan->member + 1, .with_forces = forces,
                    .atom_e = atom_e, .local = local, .local_start = local_start, .ws = ws};
    atomic_init(&job.next, 0);
    pthread_t threads[NNP_MAX_THREADS];
    worker_arg args[NNP_MAX_THREADS];
    int32_t started = 0;
    for (int32_t t = 1; t < n_threads; t++) {
        args[t] = (worker_arg){&job, &ws[t]};
        if (pthread_create(&threads[t], NULL, worker_main, &args[t]) != 0) break; /* the others take over */
        started = t;
    }
    run_chunks(&job, &ws[0]);
    for (int32_t t = 1; t <= started; t++) pthread_join(threads[t], NULL);

    /* Forces: every atom's contributions, added in chunk order. */
    double* grad = grad_out;
    if (forces) {
        for (int32_t p = 0; p < n; p++) {
            int32_t i = plan->by_element[p];
            const double* l = local + local_start[i];
            for (int k = 0; k < 3; k++) grad[3 * i + k] += l[k];
            for (int32_t a = 0; a < nl.start[i + 1] - nl.start[i]; a++) {
                int32_t j = nl.items[nl.start[i] + a].j;
                for (int k = 0; k < 3; k++) grad[3 * j + k] += l[3 * (1 + a) + k];
            }
        }
    }
    for (int32_t i = 0; i < n; i++) atom_energy[i] += atom_e[i] + model->self_energies[plan->elements[i]];
    for (int32_t t = 0; t < n_threads; t++) free_workspace(&ws[t]);
    free(ws), free(local), free(local_start), free(atom_e);
    nnp_neighbors_free(&nl);
    return st;
}

/* Energy and length factors from the model's units to the plan's. */
static void plan_units(const nnp_plan* plan, double* energy_factor, double* length_angstrom) {
    const nnp_model* model = plan->model;
    double e_unit = plan->units == NNP_UNITS_NM_KJMOL ? 1.0
                    : plan->units == NNP_UNITS_MODEL  ? model->energy_to_kjmol
                                                      : NNP_HARTREE_TO_KJMOL;
    *energy_factor = e_unit == model->energy_to_kjmol ? 1.0 : model->energy_to_kjmol / e_unit;
    *length_angstrom = plan->units == NNP_UNITS_NM_KJMOL ? 10.0
                       : plan->units == NNP_UNITS_MODEL  ? model->length_to_angstrom
                                                         : 1.0;
}

nnp_status nnp_evaluate_cpu(nnp_plan* plan, const double* positions, const double* box, double* energy,
                            double* batch_energies, double* forces) {
    if (plan == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_evaluate_cpu: plan is NULL");
    int32_t n = plan->n_atoms;
    if (n > 0 && positions == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_evaluate_cpu: positions is NULL");
    const nnp_model* model = plan->model;
    double energy_unit, to_angstrom;
    plan_units(plan, &energy_unit, &to_angstrom);
    /* plan length unit → model length unit */
    const double to_model = to_angstrom == model->length_to_angstrom ? 1.0 : to_angstrom / model->length_to_angstrom;
    for (int32_t i = 0; i < 3 * n; i++)
        if (!isfinite(positions[i]))
            return nnp_fail(NNP_ERR_NONFINITE, "coordinate %c of atom %d is not finite (%g)", "xyz"[i % 3], i / 3,
                            positions[i]);
    double box_m[9];
    if (box != NULL) {
        nnp_status st = nnp_check_box(box, model->family->cutoff(model) * model->length_to_angstrom, to_angstrom);
        if (st != NNP_OK) return st;
        for (int k = 0; k < 9; k++) box_m[k] = box[k] * to_model;
    }
    for (int32_t i = 0; i < 3 * n; i++) plan->pos[i] = positions[i] * to_model;
    double* atom_e = calloc((size_t)n + 1, sizeof *atom_e);
    double* per_batch = calloc((size_t)plan->n_batches + 1, sizeof *per_batch);
    double* grad = forces ? calloc((size_t)3 * n + 1, sizeof *grad) : NULL;
    if (atom_e == NULL || per_batch == NULL || (forces && grad == NULL)) {
        free(atom_e), free(per_batch), free(grad);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory for %d atoms", n);
    }
    nnp_status st = model->family->evaluate_cpu(plan, plan->pos, box ? box_m : NULL, atom_e, per_batch, grad);
    /* Per-batch reduction, in atom index order: E_b = (batch terms) + Σ atom energies; E = Σ_b E_b. */
    double total = 0;
    for (int32_t i = 0; i < n; i++) per_batch[plan->batches[i]] += atom_e[i];
    for (int32_t b = 0; b < plan->n_batches; b++) total += (per_batch[b] *= energy_unit);
    int finite = isfinite(total);
    for (int32_t i = 0; grad && finite && i < 3 * n; i++) finite = isfinite(grad[i]);
    if (st == NNP_OK && !finite)
        st = nnp_fail(NNP_ERR_NONFINITE, "the model gave a non-finite energy or force for these coordinates");
    if (st == NNP_OK) {
        if (energy != NULL) *energy = total;
        if (batch_energies != NULL) memcpy(batch_energies, per_batch, (size_t)plan->n_batches * sizeof *per_batch);
        if (forces != NULL)
            for (int32_t i = 0; i < 3 * n; i++) forces[i] = -grad[i] * energy_unit * to_model;
    }
    free(atom_e), free(per_batch), free(grad);
    return st;
}
