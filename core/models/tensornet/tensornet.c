/*
 * TensorNet (torchmd-net's `tensornet` model, e.g. Acellera's AceFF): the model family's payload in
 * the .nnpm container and its CPU evaluation in double precision with analytic forces.
 *
 * The maths, for one member, exactly as torchmd-net's tensornet.py, output_modules.py (Scalar),
 * utils.py (ExpNormalSmearing, CosineCutoff) and model.py (std, Atomref, mean). Units are the
 * model's own (those of the checkpoint: e.g. Å and eV).
 *
 * Edges: every ordered pair (i, j) of one batch with cutoff_lower <= d < cutoff_upper, plus a self
 * loop (i, i) of length 0; u_ij = (r_i - r_j) / d (0 for the self loop).
 *   rbf_r(d) = φ(d) exp(-β_r (exp(α (cl - d)) - μ_r)²), φ(d) = ½ (cos(π d / cu) + 1) for d < cu,
 *              α = 5 / (cu - cl), μ, β the checkpoint's buffers;
 *   C(d)     = ½ (cos(π d / cu) + 1) (cl = 0) or ½ (cos(π (2 (d - cl) / (cu - cl) + 1)) + 1) for
 *              cl < d < cu, else 0.
 * 3×3 tensors per channel f (F channels) are split into I (trace / 3), A (antisymmetric part) and S
 * (symmetric traceless part); a "channel linear" W acts on the channel index of every component.
 * Embedding: Z_ij = emb2(emb(z_i) ‖ emb(z_j)); w_k = dp_k(rbf(d)) · C(d) · Z_ij (k = 1, 2, 3);
 *   X_i = Σ_j w_1 Id + skew(w_2 u) + w_3 (u uᵀ - |u|²/3 Id);
 *   n = SiLU(L₂ SiLU(L₁ LayerNorm(|X_i|²)))  (3F values: n_I, n_A, n_S);
 *   X_i ← n_I · W_I(I) Id + n_A · W_A(A) + n_S · W_S(S).
 * Interaction (per layer): f = SiLU(L₃ SiLU(L₂ SiLU(L₁ rbf(d)))) · C(d) (3F values: f_I, f_A, f_S);
 *   X ← X / (|X|² + 1); Y = W₀(I) + W₁(A) + W₂(S);
 *   M_i = Σ_j f_I Y_j,I + f_A Y_j,A + f_S Y_j,S;
 *   O(3): B = (1 + 0.1 q)(M Y + Y M); SO(3): B = 2 Y M; B ← B / (|B|² + 1);
 *   D = W₃(I_B) + W₄(A_B) + W₅(S_B); X ← X + D + (1 + 0.1 q) D D   (q: the batch's total charge).
 * Output: x = LayerNorm(|I|², |A|², |S|²) (|·|² of the 3×3 parts), h = SiLU(W x + b), then the
 *   Scalar head (linears with SiLU between); e_i = head(h) · std + atomref(z_i);
 *   E_batch = Σ_i e_i + mean.
 * Ensembles: the mean over members, or one member.
 * Forces: the reverse pass written out stage by stage (no autodiff). Every stage runs atom by atom,
 * each atom writing only its own outputs, so results do not depend on the thread count.
 */
#include "tensornet.h"
#include "nnpm_io.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const tn_model* tn_of(const nnp_model* model) { return (const tn_model*)model->family_data; }

/* ------------------------------------------------------------------ payload */
/*
 * TensorNet's payload (after the container's family, name and units):
 *   u32 member count M; per member:
 *     u32 F, L, R, max_z, group (1 O(3), 2 SO(3)), activation (low byte, TN_ACT_*: 1 SiLU, 2 shifted
 *         softplus, 3 tanh, 4 sigmoid, 5 Swish, 6 Mish; above it the radial basis, TN_RBF_*: 0 expnorm,
 *         1 gauss), head layers H, has_atomref
 *     f64 cutoff_lower, cutoff_upper, std, mean
 *     arrays, each as u32 rows, u32 cols, rows × cols f64 (row-major):
 *       means 1×R, betas 1×R (gauss: the offsets and −coeff, R times), emb max_z×F, emb2 F×2F + 1×F, dp1..3 F×R + 1×F each,
 *       embedding channel linears W_I, W_A, W_S F×F, L₁ 2F×F + 1×2F, L₂ 3F×2F + 1×3F
 *       (rows: the I block, then A, then S), LayerNorm F weights 1×F, biases 1×F;
 *       per layer: L₁ F×R + 1×F, L₂ 2F×F + 1×2F, L₃ 3F×2F + 1×3F (blocks I, A, S), W₀..W₅ F×F;
 *       output LayerNorm 1×3F, 1×3F; linear F×3F + 1×F; H head linears (w out×in, b 1×out; the
 *       first takes F inputs, the last gives 1); atomref max_z×1 if has_atomref.
 */

typedef struct tn_reader {
    reader* r;
    double* next; /* into the member's storage */
    double* end;
    nnp_status st;
    int32_t member;
} tn_reader;

/* rows × cols values (their sizes already read) into the storage. */
static const double* tn_values(tn_reader* t, const char* what, uint32_t rows, uint32_t cols) {
    if (t->st != NNP_OK) return NULL;
    size_t n = (size_t)rows * cols;
    if ((size_t)(t->end - t->next) < n || t->r->left / 8 < n) {
        t->st = nnp_fail(NNP_ERR_FORMAT, "model file is truncated (TensorNet member %d, %s)", t->member, what);
        return NULL;
    }
    double* v = t->next;
    for (size_t k = 0; k < n; k++) {
        v[k] = get_f64(t->r);
        if (!isfinite(v[k])) {
            t->st = nnp_fail(NNP_ERR_FORMAT, "model file: TensorNet member %d: %s has a non-finite value", t->member,
                             what);
            return NULL;
        }
    }
    t->next += n;
    return v;
}

/* An array: its sizes, which must be rows × cols, then its values. */
static const double* tn_array(tn_reader* t, const char* what, uint32_t rows, uint32_t cols) {
    if (t->st != NNP_OK) return NULL;
    uint32_t r = get_u32(t->r), c = get_u32(t->r);
    if (t->r->short_read) {
        t->st = nnp_fail(NNP_ERR_FORMAT, "model file is truncated (TensorNet member %d, %s)", t->member, what);
        return NULL;
    }
    if (r != rows || c != cols) {
        t->st = nnp_fail(NNP_ERR_FORMAT, "model file: TensorNet member %d: %s is %u×%u, expected %u×%u", t->member,
                         what, r, c, rows, cols);
        return NULL;
    }
    return tn_values(t, what, rows, cols);
}

static void tn_lin(tn_reader* t, tn_linear* l, const char* what, int32_t n_out, int32_t n_in, int bias) {
    char name[96];
    l->n_in = n_in, l->n_out = n_out;
    snprintf(name, sizeof name, "%s weight", what);
    l->w = tn_array(t, name, (uint32_t)n_out, (uint32_t)n_in);
    l->b = NULL;
    if (bias) {
        snprintf(name, sizeof name, "%s bias", what);
        l->b = tn_array(t, name, 1, (uint32_t)n_out);
    }
}

/* Values of a member's storage: everything but the head (whose layers are allocated apart). */
static size_t tn_member_size(const tn_member* m) {
    size_t F = (size_t)m->F, R = (size_t)m->R, Z = (size_t)m->max_z;
    size_t n = 2 * R + Z * F + (2 * F * F + F) + 3 * (F * R + F) + 3 * F * F + (2 * F * F + 2 * F) +
               (6 * F * F + 3 * F) + 2 * F;
    n += (size_t)m->L * ((F * R + F) + (2 * F * F + 2 * F) + (6 * F * F + 3 * F) + 6 * F * F);
    n += 6 * F + (3 * F * F + F);
    if (m->has_atomref) n += Z;
    return n;
}

static nnp_status tn_transpose(tn_member* m, int32_t index);
static void table_free(tn_table* t);

static nnp_status tn_read_member(reader* r, int32_t index, tn_member* m) {
    uint32_t F = get_u32(r), L = get_u32(r), R = get_u32(r), Z = get_u32(r), group = get_u32(r), act_rbf = get_u32(r),
             H = get_u32(r), has_ref = get_u32(r);
    const uint32_t act = act_rbf & 0xffu, basis = act_rbf >> 8; /* older files: basis 0 (expnorm) */
    m->cl = get_f64(r), m->cu = get_f64(r), m->std = get_f64(r), m->mean = get_f64(r);
    if (r->short_read) return nnp_fail(NNP_ERR_FORMAT, "model file is truncated (TensorNet member %d)", index);
    if (F < 1 || F > TN_MAX_WIDTH || L > TN_MAX_LAYERS || R < 1 || R > TN_MAX_WIDTH || Z < 2 || Z > TN_MAX_Z ||
        H < 1 || H > TN_MAX_HEAD || has_ref > 1)
        return nnp_fail(NNP_ERR_FORMAT, "model file: TensorNet member %d has sizes out of range (F %u, layers %u, "
                        "radial functions %u, max_z %u, head layers %u)", index, F, L, R, Z, H);
    if (group != TN_GROUP_O3 && group != TN_GROUP_SO3)
        return nnp_fail(NNP_ERR_FORMAT, "model file: TensorNet member %d has symmetry group %u (1 O(3), 2 SO(3))",
                        index, group);
    if (basis != TN_RBF_EXPNORM && basis != TN_RBF_GAUSS)
        return nnp_fail(NNP_ERR_FORMAT, "model file: TensorNet member %d has radial basis %u (0 expnorm, 1 gauss)", index, basis);
    if (act < TN_ACT_SILU || act > TN_ACT_MISH)
        return nnp_fail(NNP_ERR_FORMAT, "model file: TensorNet member %d has activation %u (1 SiLU, 2 shifted softplus, "
                        "3 tanh, 4 sigmoid, 5 Swish, 6 Mish)", index, act);
    if (!(m->cl >= 0 && m->cu > m->cl && m->cu < 1e3) || !isfinite(m->std) || !isfinite(m->mean))
        return nnp_fail(NNP_ERR_FORMAT, "model file: TensorNet member %d: cutoffs %g, %g, std %g, mean %g are not "
                        "valid", index, m->cl, m->cu, m->std, m->mean);
    m->F = (int32_t)F, m->L = (int32_t)L, m->R = (int32_t)R, m->max_z = (int32_t)Z;
    m->group = (int32_t)group, m->activation = (int32_t)act, m->n_head = (int32_t)H, m->has_atomref = (int32_t)has_ref;
    m->rbf = (int32_t)basis;
    m->alpha = 5.0 / (m->cu - m->cl);
    /* The head's sizes come with it: each of its layers has its own allocation (below). */
    for (int32_t h = 0; h < TN_MAX_HEAD; h++) m->head[h].w = NULL;
    size_t size = tn_member_size(m);
    m->storage = malloc((size + 1) * sizeof(double));
    if (m->storage == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory for TensorNet member %d", index);
    tn_reader t = {r, m->storage, m->storage + size, NNP_OK, index};
    int32_t Fi = (int32_t)F, Ri = (int32_t)R;
    m->means = tn_array(&t, "expnorm means", 1, R);
    m->betas = tn_array(&t, "expnorm betas", 1, R);
    m->emb = tn_array(&t, "embedding", Z, F);
    tn_lin(&t, &m->emb2, "emb2", Fi, 2 * Fi, 1);
    tn_lin(&t, &m->dp[0], "distance_proj1", Fi, Ri, 1);
    tn_lin(&t, &m->dp[1], "distance_proj2", Fi, Ri, 1);
    tn_lin(&t, &m->dp[2], "distance_proj3", Fi, Ri, 1);
    for (int k = 0; k < 3; k++) tn_lin(&t, &m->elt[k], "embedding linears_tensor", Fi, Fi, 0);
    tn_lin(&t, &m->els[0], "embedding linears_scalar.0", 2 * Fi, Fi, 1);
    tn_lin(&t, &m->els[1], "embedding linears_scalar.1", 3 * Fi, 2 * Fi, 1);
    m->init_w = tn_array(&t, "init_norm weight", 1, F);
    m->init_b = tn_array(&t, "init_norm bias", 1, F);
    for (int32_t l = 0; l < m->L; l++) {
        tn_lin(&t, &m->lls[l][0], "layer linears_scalar.0", Fi, Ri, 1);
        tn_lin(&t, &m->lls[l][1], "layer linears_scalar.1", 2 * Fi, Fi, 1);
        tn_lin(&t, &m->lls[l][2], "layer linears_scalar.2", 3 * Fi, 2 * Fi, 1);
        for (int k = 0; k < 6; k++) tn_lin(&t, &m->llt[l][k], "layer linears_tensor", Fi, Fi, 0);
    }
    m->out_w = tn_array(&t, "out_norm weight", 1, 3 * F);
    m->out_b = tn_array(&t, "out_norm bias", 1, 3 * F);
    tn_lin(&t, &m->linear, "linear", Fi, 3 * Fi, 1);
    if (t.st != NNP_OK) return t.st;
    /* The head: one allocation per layer (weights and bias), sized as the layer is read. */
    int32_t n_in = Fi;
    for (int32_t h = 0; h < m->n_head; h++) {
        uint32_t rows = get_u32(r), cols = get_u32(r);
        if (r->short_read) return nnp_fail(NNP_ERR_FORMAT, "model file is truncated (TensorNet member %d, head)", index);
        if ((int32_t)cols != n_in || rows < 1 || rows > TN_MAX_WIDTH || (h == m->n_head - 1 && rows != 1))
            return nnp_fail(NNP_ERR_FORMAT, "model file: TensorNet member %d: head layer %d is %u×%u (takes %d inputs%s)",
                            index, h, rows, cols, n_in, h == m->n_head - 1 ? ", gives 1 output" : "");
        const size_t need = (size_t)rows * cols + rows;
        double* layer = malloc(need * sizeof(double));
        if (layer == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory for TensorNet member %d", index);
        m->head[h].w = layer; /* freed with the member from here on */
        m->head[h].n_in = (int32_t)cols, m->head[h].n_out = (int32_t)rows;
        tn_reader th = {r, layer, layer + need, NNP_OK, index};
        tn_values(&th, "head weight", rows, cols);
        m->head[h].b = tn_array(&th, "head bias", 1, rows);
        if (th.st != NNP_OK) return th.st;
        n_in = (int32_t)rows;
    }
    m->atomref = NULL;
    if (m->has_atomref) {
        m->atomref = tn_array(&t, "atomref", Z, 1);
        if (t.st != NNP_OK) return t.st; /* the head is freed with the member */
    }
    return tn_transpose(m, index);
}

static void tn_free_member(tn_member* m) {
    if (m->storage == NULL) return;
    for (int32_t h = 0; h < m->n_head; h++) free((void*)m->head[h].w);
    free(m->storage);
    free(m->transposed);
    m->storage = NULL, m->transposed = NULL;
}

/* Every linear of the member, for the transposes made on load. */
static int32_t tn_linears(tn_member* m, tn_linear** out) {
    int32_t n = 0;
    out[n++] = &m->emb2;
    for (int k = 0; k < 3; k++) out[n++] = &m->dp[k], out[n++] = &m->elt[k];
    out[n++] = &m->els[0], out[n++] = &m->els[1], out[n++] = &m->linear;
    for (int32_t l = 0; l < m->L; l++) {
        for (int k = 0; k < 3; k++) out[n++] = &m->lls[l][k];
        for (int k = 0; k < 6; k++) out[n++] = &m->llt[l][k];
    }
    for (int32_t h = 0; h < m->n_head; h++) out[n++] = &m->head[h];
    return n;
}

static nnp_status tn_transpose(tn_member* m, int32_t index) {
    tn_linear* all[10 + 9 * TN_MAX_LAYERS + TN_MAX_HEAD];
    int32_t n = tn_linears(m, all);
    size_t total = 0;
    for (int32_t k = 0; k < n; k++) total += (size_t)all[k]->n_in * (size_t)all[k]->n_out;
    m->transposed = malloc((total + 1) * sizeof(double));
    if (m->transposed == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory for TensorNet member %d", index);
    double* next = m->transposed;
    for (int32_t k = 0; k < n; k++) {
        tn_linear* L = all[k];
        for (int32_t o = 0; o < L->n_out; o++)
            for (int32_t i = 0; i < L->n_in; i++) next[(size_t)i * L->n_out + o] = L->w[(size_t)o * L->n_in + i];
        L->wt = next;
        next += (size_t)L->n_in * L->n_out;
    }
    return NNP_OK;
}

static void tn_free(nnp_model* model) {
    tn_model* tm = (tn_model*)model->family_data;
    if (tm == NULL) return;
    for (int32_t k = 0; k < tm->n_members; k++) tn_free_member(&tm->members[k]);
    if (tm->tables != NULL)
        for (int32_t k = 0; k < tm->n_members; k++) table_free(&tm->tables[k]);
    free(tm->tables);
    pthread_mutex_destroy(&tm->table_lock);
    free(tm->members);
    free(tm);
    model->family_data = NULL;
}

static nnp_status tn_read_payload(reader* r, nnp_model* model) {
    uint32_t M = get_u32(r);
    if (r->short_read) return nnp_fail(NNP_ERR_FORMAT, "model file is truncated (TensorNet)");
    if (M < 1 || M > NNP_MAX_MEMBERS) return nnp_fail(NNP_ERR_FORMAT, "model file: TensorNet with %u members", M);
    tn_model* tm = calloc(1, sizeof *tm);
    tn_member* members = calloc(M, sizeof *members);
    if (tm == NULL || members == NULL) {
        free(tm), free(members);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    }
    tm->members = members;
    pthread_mutex_init(&tm->table_lock, NULL);
    model->family_data = tm;
    tm->cutoff = 0;
    tm->max_z = TN_MAX_Z;
    for (uint32_t k = 0; k < M; k++) {
        nnp_status st = tn_read_member(r, (int32_t)k, &members[k]);
        tm->n_members = (int32_t)k + 1;
        if (st != NNP_OK) return st; /* the caller frees the model */
        if (members[k].cu > tm->cutoff) tm->cutoff = members[k].cu;
        if (members[k].max_z < tm->max_z) tm->max_z = members[k].max_z;
    }
    model->n_members = (int32_t)M;
    /* Elements: atomic numbers 1 .. max_z - 1 that have a symbol. */
    int32_t n = 0;
    while (n + 1 < tm->max_z && nnp_element_symbol(n + 1) != NULL) n++;
    model->n_elements = n;
    return NNP_OK;
}

static void put_array(writer* w, const double* v, uint32_t rows, uint32_t cols) {
    put_u32(w, rows);
    put_u32(w, cols);
    for (size_t k = 0; k < (size_t)rows * cols; k++) put_f64(w, v[k]);
}

static void put_lin(writer* w, const tn_linear* l) {
    put_array(w, l->w, (uint32_t)l->n_out, (uint32_t)l->n_in);
    if (l->b != NULL) put_array(w, l->b, 1, (uint32_t)l->n_out);
}

static void tn_write_payload(writer* w, const nnp_model* model) {
    const tn_model* tm = tn_of(model);
    put_u32(w, (uint32_t)tm->n_members);
    for (int32_t k = 0; k < tm->n_members; k++) {
        const tn_member* m = &tm->members[k];
        uint32_t F = (uint32_t)m->F;
        put_u32(w, F), put_u32(w, (uint32_t)m->L), put_u32(w, (uint32_t)m->R), put_u32(w, (uint32_t)m->max_z);
        put_u32(w, (uint32_t)m->group), put_u32(w, (uint32_t)m->activation | (uint32_t)m->rbf << 8), put_u32(w, (uint32_t)m->n_head);
        put_u32(w, (uint32_t)m->has_atomref);
        put_f64(w, m->cl), put_f64(w, m->cu), put_f64(w, m->std), put_f64(w, m->mean);
        put_array(w, m->means, 1, (uint32_t)m->R);
        put_array(w, m->betas, 1, (uint32_t)m->R);
        put_array(w, m->emb, (uint32_t)m->max_z, F);
        put_lin(w, &m->emb2);
        for (int i = 0; i < 3; i++) put_lin(w, &m->dp[i]);
        for (int i = 0; i < 3; i++) put_lin(w, &m->elt[i]);
        put_lin(w, &m->els[0]);
        put_lin(w, &m->els[1]);
        put_array(w, m->init_w, 1, F);
        put_array(w, m->init_b, 1, F);
        for (int32_t l = 0; l < m->L; l++) {
            for (int i = 0; i < 3; i++) put_lin(w, &m->lls[l][i]);
            for (int i = 0; i < 6; i++) put_lin(w, &m->llt[l][i]);
        }
        put_array(w, m->out_w, 1, 3 * F);
        put_array(w, m->out_b, 1, 3 * F);
        put_lin(w, &m->linear);
        for (int32_t h = 0; h < m->n_head; h++) put_lin(w, &m->head[h]);
        if (m->has_atomref) put_array(w, m->atomref, (uint32_t)m->max_z, 1);
    }
}

static double tn_cutoff(const nnp_model* model) { return tn_of(model)->cutoff; }

static int32_t tn_element_index(const nnp_model* model, int32_t z) {
    return z >= 1 && z <= model->n_elements ? z : -1;
}

static nnp_status tn_check_charge(const nnp_model* model, int32_t batch, int32_t charge) {
    (void)model, (void)batch, (void)charge;
    return NNP_OK;
}

/* ------------------------------------------------------------------ building blocks */

/* Irreducible parts of 3×3 tensors, 10 components per channel (component-major, F channels each):
   0 I; 1..3 A01, A02, A12; 4..9 S00, S11, S22, S01, S02, S12. Full tensors: 9 components r·3 + c. */
#define NI 10
static const int tn_part[NI] = {0, 1, 1, 1, 2, 2, 2, 2, 2, 2}; /* I, A or S */

/* The activation `kind` (TN_ACT_*) and its derivative, as torch computes them: softplus(z) = z above
   20 (F.softplus's threshold), else log1p(exp(z)); the shifted softplus subtracts torchmd-net's
   shift, log 2 in float32 (torch.log(torch.tensor(2.0)).item()); Mish = z tanh(log1p(exp(z))). */
static double tn_act(int32_t kind, double z) {
    switch (kind) {
    case TN_ACT_SSP: return (z > 20 ? z : log1p(exp(z))) - 0.693147182464599609375; /* log 2 rounded to float32 */
    case TN_ACT_TANH: return tanh(z);
    case TN_ACT_SIGMOID: return 1 / (1 + exp(-z));
    case TN_ACT_MISH: return z * tanh(log1p(exp(z)));
    default: return z / (1 + exp(-z)); /* SiLU, Swish */
    }
}
static double tn_act_d(int32_t kind, double z) {
    const double s = 1 / (1 + exp(-z));
    switch (kind) {
    case TN_ACT_SSP: return z > 20 ? 1 : s;
    case TN_ACT_TANH: {
        const double t = tanh(z);
        return 1 - t * t;
    }
    case TN_ACT_SIGMOID: return s * (1 - s);
    case TN_ACT_MISH: {
        const double t = tanh(log1p(exp(z)));
        return t + z * s * (1 - t * t);
    }
    default: return s * (1 + z * (1 - s)); /* SiLU, Swish */
    }
}

static void decompose(int32_t F, const double* M, double* T) {
    for (int32_t f = 0; f < F; f++) {
        double m[9];
        for (int c = 0; c < 9; c++) m[c] = M[c * F + f];
        double I = (m[0] + m[4] + m[8]) / 3;
        T[0 * F + f] = I;
        T[1 * F + f] = 0.5 * (m[1] - m[3]);
        T[2 * F + f] = 0.5 * (m[2] - m[6]);
        T[3 * F + f] = 0.5 * (m[5] - m[7]);
        T[4 * F + f] = m[0] - I;
        T[5 * F + f] = m[4] - I;
        T[6 * F + f] = m[8] - I;
        T[7 * F + f] = 0.5 * (m[1] + m[3]);
        T[8 * F + f] = 0.5 * (m[2] + m[6]);
        T[9 * F + f] = 0.5 * (m[5] + m[7]);
    }
}

/* gM = (d decompose)ᵀ gT */
static void decompose_adj(int32_t F, const double* gT, double* gM) {
    for (int32_t f = 0; f < F; f++) {
        double g[NI];
        for (int c = 0; c < NI; c++) g[c] = gT[c * F + f];
        double tr = (g[4] + g[5] + g[6]) / 3, i3 = g[0] / 3;
        gM[0 * F + f] = i3 + g[4] - tr;
        gM[4 * F + f] = i3 + g[5] - tr;
        gM[8 * F + f] = i3 + g[6] - tr;
        gM[1 * F + f] = 0.5 * (g[1] + g[7]);
        gM[3 * F + f] = 0.5 * (g[7] - g[1]);
        gM[2 * F + f] = 0.5 * (g[2] + g[8]);
        gM[6 * F + f] = 0.5 * (g[8] - g[2]);
        gM[5 * F + f] = 0.5 * (g[3] + g[9]);
        gM[7 * F + f] = 0.5 * (g[9] - g[3]);
    }
}

static void compose(int32_t F, const double* T, double* M) {
    for (int32_t f = 0; f < F; f++) {
        double t[NI];
        for (int c = 0; c < NI; c++) t[c] = T[c * F + f];
        M[0 * F + f] = t[0] + t[4];
        M[4 * F + f] = t[0] + t[5];
        M[8 * F + f] = t[0] + t[6];
        M[1 * F + f] = t[7] + t[1];
        M[3 * F + f] = t[7] - t[1];
        M[2 * F + f] = t[8] + t[2];
        M[6 * F + f] = t[8] - t[2];
        M[5 * F + f] = t[9] + t[3];
        M[7 * F + f] = t[9] - t[3];
    }
}

/* gT = (d compose)ᵀ gM */
static void compose_adj(int32_t F, const double* gM, double* gT) {
    for (int32_t f = 0; f < F; f++) {
        double g[9];
        for (int c = 0; c < 9; c++) g[c] = gM[c * F + f];
        gT[0 * F + f] = g[0] + g[4] + g[8];
        gT[4 * F + f] = g[0];
        gT[5 * F + f] = g[4];
        gT[6 * F + f] = g[8];
        gT[1 * F + f] = g[1] - g[3];
        gT[7 * F + f] = g[1] + g[3];
        gT[2 * F + f] = g[2] - g[6];
        gT[8 * F + f] = g[2] + g[6];
        gT[3 * F + f] = g[5] - g[7];
        gT[9 * F + f] = g[5] + g[7];
    }
}

/* y = W x + b: each output's sum from its bias over k in order, as rows of Wᵀ (vectorised over the
   outputs). */
static void lin(const tn_linear* L, const double* restrict x, double* restrict y) {
    const int32_t n = L->n_out;
    if (L->b) memcpy(y, L->b, (size_t)n * sizeof *y);
    else memset(y, 0, (size_t)n * sizeof *y);
    for (int32_t k = 0; k < L->n_in; k++) {
        const double* restrict w = L->wt + (size_t)k * n;
        const double xk = x[k];
        for (int32_t o = 0; o < n; o++) y[o] += w[o] * xk;
    }
}

/* gx += Wᵀ gy */
static void lin_t(const tn_linear* L, const double* gy, double* gx) {
    for (int32_t o = 0; o < L->n_out; o++) {
        const double* w = L->w + (size_t)o * L->n_in;
        double g = gy[o];
        if (g == 0) continue;
        for (int32_t k = 0; k < L->n_in; k++) gx[k] += w[k] * g;
    }
}

/* Channel linears on the irreducible parts: out[c] = W_part(c) T[c] (no bias). */
static void chan_lin3(const tn_linear* W, int32_t F, const double* T, double* out) {
    for (int c = 0; c < NI; c++) lin(&W[tn_part[c]], T + (size_t)c * F, out + (size_t)c * F);
}

/* gT = W_part(c)ᵀ gout[c] (overwrites gT) */
static void chan_lin3_t(const tn_linear* W, int32_t F, const double* gout, double* gT) {
    memset(gT, 0, (size_t)NI * F * sizeof *gT);
    for (int c = 0; c < NI; c++) lin_t(&W[tn_part[c]], gout + (size_t)c * F, gT + (size_t)c * F);
}

/* C = A B per channel (full tensors); accumulate into C with factor s. */
static void matmul_add(int32_t F, double s, const double* A, const double* B, double* C) {
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++)
            for (int32_t f = 0; f < F; f++) {
                double v = 0;
                for (int k = 0; k < 3; k++) v += A[(r * 3 + k) * F + f] * B[(k * 3 + c) * F + f];
                C[(r * 3 + c) * F + f] += s * v;
            }
}

/* C += s Aᵀ B and C += s A Bᵀ */
static void matmul_tn_add(int32_t F, double s, const double* A, const double* B, double* C) {
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++)
            for (int32_t f = 0; f < F; f++) {
                double v = 0;
                for (int k = 0; k < 3; k++) v += A[(k * 3 + r) * F + f] * B[(k * 3 + c) * F + f];
                C[(r * 3 + c) * F + f] += s * v;
            }
}
static void matmul_nt_add(int32_t F, double s, const double* A, const double* B, double* C) {
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 3; c++)
            for (int32_t f = 0; f < F; f++) {
                double v = 0;
                for (int k = 0; k < 3; k++) v += A[(r * 3 + k) * F + f] * B[(c * 3 + k) * F + f];
                C[(r * 3 + c) * F + f] += s * v;
            }
}

/* Frobenius squares per channel. */
static void tnorm(int32_t F, const double* M, double* n) {
    for (int32_t f = 0; f < F; f++) {
        double s = 0;
        for (int c = 0; c < 9; c++) s += M[c * F + f] * M[c * F + f];
        n[f] = s;
    }
}

/* LayerNorm over n values (biased variance, eps 1e-5); xhat and rstd for the backward pass. */
static void layer_norm(int32_t n, const double* x, const double* w, const double* b, double* y, double* xhat,
                       double* rstd) {
    double mean = 0, var = 0;
    for (int32_t k = 0; k < n; k++) mean += x[k];
    mean /= n;
    for (int32_t k = 0; k < n; k++) var += (x[k] - mean) * (x[k] - mean);
    var /= n;
    double r = 1 / sqrt(var + TN_LN_EPS);
    for (int32_t k = 0; k < n; k++) {
        xhat[k] = (x[k] - mean) * r;
        y[k] = xhat[k] * w[k] + b[k];
    }
    *rstd = r;
}

/* gx = d LayerNorm ᵀ gy */
static void layer_norm_back(int32_t n, const double* xhat, double rstd, const double* w, const double* gy, double* gx) {
    double m1 = 0, m2 = 0;
    for (int32_t k = 0; k < n; k++) {
        double g = gy[k] * w[k];
        m1 += g;
        m2 += g * xhat[k];
    }
    m1 /= n, m2 /= n;
    for (int32_t k = 0; k < n; k++) gx[k] = rstd * (gy[k] * w[k] - m1 - xhat[k] * m2);
}

/* Radial basis and its derivative at d: expnorm φ(d) exp(−β (exp(α (cl − d)) − μ)²) with its own
   cosine cutoff φ, or gauss exp(−β (d − μ)²) (torchmd-net's GaussianSmearing, coeff = −β). */
static void rbf(const tn_member* m, double d, double* out, double* dout) {
    if (m->rbf == TN_RBF_GAUSS) {
        for (int32_t r = 0; r < m->R; r++) {
            double x = d - m->means[r], e = exp(-m->betas[r] * x * x);
            out[r] = e;
            if (dout) dout[r] = -2 * m->betas[r] * x * e;
        }
        return;
    }
    double phi = 0, dphi = 0;
    if (d < m->cu) {
        phi = 0.5 * (cos(TN_PI * d / m->cu) + 1);
        dphi = -0.5 * TN_PI / m->cu * sin(TN_PI * d / m->cu);
    }
    double t = exp(m->alpha * (m->cl - d));
    for (int32_t r = 0; r < m->R; r++) {
        double x = t - m->means[r];
        double e = exp(-m->betas[r] * x * x);
        out[r] = phi * e;
        if (dout) dout[r] = dphi * e + phi * e * 2 * m->alpha * m->betas[r] * t * x;
    }
}

/* Cosine cutoff and its derivative at d. */
static void cutoff(const tn_member* m, double d, double* c, double* dc) {
    *c = 0, *dc = 0;
    if (m->cl > 0) {
        if (d > m->cl && d < m->cu) {
            double k = TN_PI * 2 / (m->cu - m->cl);
            double a = k * (d - m->cl) + TN_PI;
            *c = 0.5 * (cos(a) + 1);
            *dc = -0.5 * sin(a) * k;
        }
    } else if (d < m->cu) {
        *c = 0.5 * (cos(TN_PI * d / m->cu) + 1);
        *dc = -0.5 * TN_PI / m->cu * sin(TN_PI * d / m->cu);
    }
}

/* ------------------------------------------------------------------ radial tables */
/*
 * With NNP_PRECISION_SINGLE the CPU evaluation reads the filters, which depend on the distance only,
 * from tables instead of running their networks for every edge: values and slopes (forward mode,
 * exact) at TN_TABLE_INTERVALS + 1 evenly spaced nodes over [cutoff_lower, cutoff_upper], cubic
 * Hermite interpolation between them. The forces use the interpolant's own derivative, so they are
 * the exact gradient of the energy computed. The self loop (d = 0) takes exact values.
 */

/* y = W x (no bias) */
static void lin_nobias(const tn_linear* L, const double* x, double* y) {
    const tn_linear nb = {.n_in = L->n_in, .n_out = L->n_out, .wt = L->wt};
    lin(&nb, x, y);
}

/* Every filter's values (and, with slope != NULL, slopes) at d, exactly: width 3F per filter, in
   filter order. s: 2R + 16F. */
static void filters_exact(const tn_member* m, double d, double* val, double* slope, double* s) {
    const int32_t F = m->F, R = m->R, W = 3 * F;
    double *rb = s, *drb = rb + R, *h = drb + R, *dh = h + 3 * F, *a = dh + 3 * F, *da = a + 2 * F;
    double c, dc;
    rbf(m, d, rb, drb);
    cutoff(m, d, &c, &dc);
    for (int q = 0; q < 3; q++) {
        double *v = val + q * F, *g = slope ? slope + q * F : NULL;
        lin(&m->dp[q], rb, h);
        lin_nobias(&m->dp[q], drb, dh);
        for (int32_t f = 0; f < F; f++) {
            v[f] = h[f] * c;
            if (g) g[f] = dh[f] * c + h[f] * dc;
        }
    }
    for (int32_t l = 0; l < m->L; l++) {
        const tn_linear* lls = m->lls[l];
        double *v = val + (size_t)(1 + l) * W, *g = slope ? slope + (size_t)(1 + l) * W : NULL;
        lin(&lls[0], rb, h);
        lin_nobias(&lls[0], drb, dh);
        for (int32_t k = 0; k < F; k++) a[k] = tn_act(m->activation, h[k]), da[k] = tn_act_d(m->activation, h[k]) * dh[k];
        lin(&lls[1], a, h);
        lin_nobias(&lls[1], da, dh);
        for (int32_t k = 0; k < 2 * F; k++) a[k] = tn_act(m->activation, h[k]), da[k] = tn_act_d(m->activation, h[k]) * dh[k];
        lin(&lls[2], a, h);
        lin_nobias(&lls[2], da, dh);
        for (int32_t k = 0; k < W; k++) {
            double sk = tn_act(m->activation, h[k]);
            v[k] = sk * c;
            if (g) g[k] = tn_act_d(m->activation, h[k]) * dh[k] * c + sk * dc;
        }
    }
}

typedef struct table_build {
    const tn_member* m;
    tn_table* t;
    double* scratch; /* per thread: (2 n_filters + 4) · 3F + 2R values */
    size_t scratch_n;
} table_build;

static void st_table_node(void* p, int32_t node, int32_t thread) {
    table_build* b = p;
    tn_table* t = b->t;
    const size_t W = (size_t)t->width, nf = (size_t)t->n_filters;
    double *val = b->scratch + (size_t)thread * b->scratch_n, *slope = val + nf * W, *s = slope + nf * W;
    filters_exact(b->m, t->lo + node * t->h, val, slope, s);
    for (size_t k = 0; k < nf; k++) {
        double* out = t->nodes + (k * (size_t)(t->intervals + 1) + (size_t)node) * 2 * W;
        memcpy(out, val + k * W, W * sizeof *out);
        memcpy(out + W, slope + k * W, W * sizeof *out);
    }
}

static void table_free(tn_table* t) {
    free(t->self), free(t->nodes);
    t->self = t->nodes = NULL;
}

static nnp_status table_make(const tn_member* m, int32_t n_threads, tn_table* t) {
    const size_t W = 3 * (size_t)m->F, nf = (size_t)m->L + 1, nodes = TN_TABLE_INTERVALS + 1;
    *t = (tn_table){.intervals = TN_TABLE_INTERVALS, .width = (int32_t)W, .n_filters = (int32_t)nf, .lo = m->cl,
                    .h = (m->cu - m->cl) / TN_TABLE_INTERVALS};
    table_build b = {.m = m, .t = t, .scratch_n = (2 * nf + 4) * W + 2 * (size_t)m->R};
    t->self = malloc(nf * W * sizeof *t->self);
    t->nodes = malloc(nf * nodes * 2 * W * sizeof *t->nodes);
    b.scratch = malloc((size_t)n_threads * b.scratch_n * sizeof *b.scratch);
    if (t->self == NULL || t->nodes == NULL || b.scratch == NULL) {
        table_free(t), free(b.scratch);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory for TensorNet's radial tables");
    }
    filters_exact(m, 0, t->self, NULL, b.scratch);
    nnp_parallel_for(n_threads, (int32_t)nodes, st_table_node, &b);
    free(b.scratch);
    return NNP_OK;
}

/* The model's tables, made by the first evaluation that asks (the model may be shared by plans on
   several threads). */
static nnp_status tables_of(const nnp_model* model, int32_t n_threads, const tn_table** out) {
    tn_model* tm = (tn_model*)model->family_data;
    nnp_status st = NNP_OK;
    pthread_mutex_lock(&tm->table_lock);
    if (tm->tables == NULL) {
        tn_table* t = calloc((size_t)tm->n_members, sizeof *t);
        if (t == NULL) st = nnp_fail(NNP_ERR_MEMORY, "out of memory for TensorNet's radial tables");
        for (int32_t k = 0; st == NNP_OK && k < tm->n_members; k++) st = table_make(&tm->members[k], n_threads, &t[k]);
        if (st == NNP_OK) tm->tables = t;
        else if (t != NULL) {
            for (int32_t k = 0; k < tm->n_members; k++) table_free(&t[k]);
            free(t);
        }
    }
    *out = tm->tables;
    pthread_mutex_unlock(&tm->table_lock);
    return st;
}

/* Filter k's values (with val != NULL) and slopes (with slope != NULL) at d: the self loop's exact values when self, else
   the interpolant at cutoff_lower <= d < cutoff_upper. */
static void table_at(const tn_table* t, int32_t k, int self, double d, double* restrict val, double* restrict slope) {
    const int32_t W = t->width;
    if (self) {
        memcpy(val, t->self + (size_t)k * W, (size_t)W * sizeof *val);
        if (slope) memset(slope, 0, (size_t)W * sizeof *slope);
        return;
    }
    double x = (d - t->lo) / t->h;
    int32_t g = (int32_t)x;
    if (g > t->intervals - 1) g = t->intervals - 1;
    if (g < 0) g = 0;
    const double s = x - g, h = t->h, r = 1 - s;
    const double h00 = (1 + 2 * s) * r * r, h01 = s * s * (3 - 2 * s), h10 = h * s * r * r, h11 = -h * s * s * r;
    const double* restrict n0 = t->nodes + ((size_t)k * (size_t)(t->intervals + 1) + (size_t)g) * 2 * W;
    const double* restrict n1 = n0 + 2 * W;
    if (val)
        for (int32_t c = 0; c < W; c++) val[c] = h00 * n0[c] + h01 * n1[c] + h10 * n0[W + c] + h11 * n1[W + c];
    if (slope == NULL) return;
    const double e0 = 6 * s * r / h, e10 = r * (1 - 3 * s), e11 = s * (3 * s - 2);
    for (int32_t c = 0; c < W; c++) slope[c] = e0 * (n1[c] - n0[c]) + e10 * n0[W + c] + e11 * n1[W + c];
}

/* ------------------------------------------------------------------ evaluation */

/* One member's evaluation over a plan: per-atom state, stage by stage (see the header). Edges of
   atom i: its self loop at edge index start[i] + i, then its neighbour items in order. */
typedef struct tn_eval {
    const tn_member* m;
    const nnp_plan* plan;
    const nnp_neighbors* nl;
    int32_t n, layer, forces;
    size_t F;
    const double* cq; /* 1 + 0.1 q per atom */
    const tn_table* tab; /* the filters from tables (NNP_PRECISION_SINGLE), or NULL: their networks */
    int simd;            /* with tables: the nnp_cpu_simd of the linears (not AUTO) */
    double *Zp, *Zq;  /* emb2 split per atom: Z_ij = Zp_i + Zq_j (F each) */
    double* Xe;       /* the embedding's sum of edge tensors (9F) */
    double* X;        /* input of layer l at l · n · 9F, output at L · n · 9F */
    double *Yirr, *Mirr, *B, *dX; /* per layer and atom: 10F, 10F, 9F, 9F */
    double *gX, *gM, *gY;         /* per atom: 9F, 10F, 10F */
    double* fac;                  /* per edge, current layer: 3F */
    double *kept_fac, *kept;      /* with forces and when small enough (TN_KEEP_BYTES): every layer's
                                     factors (3F) and radial MLP intermediates (7F + 2R) per edge, left by
                                     the forward pass for the backward pass (the same values it would
                                     compute again); else NULL */
    size_t n_edges;
    double *gd, *gu;              /* per edge: dE/dd, dE/du (3) */
    double* energy;               /* per atom */
    double* scratch;
    size_t scratch_n;
} tn_eval;

/* ------------------------------------------------------------------ linears of the tables path */
/*
 * With tables (NNP_PRECISION_SINGLE) the per-atom linears run on SIMD (nnp_plan_set_cpu_simd):
 * tn_mac (linear_simd.h) with fused multiply-adds for AVX2 and AVX-512F, which give the same bits;
 * the baseline multiplies and adds apart, as the exact path. Without tables the exact path's own
 * loops (lin, lin_t, chan_lin3, chan_lin3_t) run, whatever the CPU.
 */
#define TN_MAC_COLS 6 /* vectors that share one pass over a matrix */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#define TN_SIMD_X86 1
#include <immintrin.h>
#define SFX avx2
#define ATTR __attribute__((target("avx2,fma")))
#define V __m256d
#define VL 4
#define VLOAD _mm256_loadu_pd
#define VSTORE _mm256_storeu_pd
#define VSET1 _mm256_set1_pd
#define VFMA _mm256_fmadd_pd
#include "linear_simd.h"
#define SFX avx512
#define ATTR __attribute__((target("avx512f,fma")))
#define V __m512d
#define VL 8
#define VLOAD _mm512_loadu_pd
#define VSTORE _mm512_storeu_pd
#define VSET1 _mm512_set1_pd
#define VFMA _mm512_fmadd_pd
#include "linear_simd.h"
#else
#define TN_SIMD_X86 0
#endif

/* y_v[o] += Σ_k M[k · n_out + o] · x_v[k], v < nv ≤ TN_MAC_COLS */
static void mac(int simd, const double* M, int32_t n_k, int32_t n_out, int nv, const double* const* x, double* const* y) {
#if TN_SIMD_X86
    if (simd == NNP_CPU_SIMD_AVX512) return tn_mac_avx512(M, n_k, n_out, nv, x, y);
    if (simd == NNP_CPU_SIMD_AVX2) return tn_mac_avx2(M, n_k, n_out, nv, x, y);
#endif
    (void)simd;
    for (int v = 0; v < nv; v++)
        for (int32_t k = 0; k < n_k; k++) {
            const double* restrict mk = M + (size_t)k * (size_t)n_out;
            double* restrict yv = y[v];
            const double xk = x[v][k];
            for (int32_t o = 0; o < n_out; o++) yv[o] += mk[o] * xk;
        }
}

/* lin, lin_t, chan_lin3 and chan_lin3_t of the evaluation: on SIMD with tables, else the exact loops. */
static void lin_e(const tn_eval* ev, const tn_linear* L, const double* x, double* y) {
    if (ev->tab == NULL) return lin(L, x, y);
    if (L->b) memcpy(y, L->b, (size_t)L->n_out * sizeof *y);
    else memset(y, 0, (size_t)L->n_out * sizeof *y);
    mac(ev->simd, L->wt, L->n_in, L->n_out, 1, &x, &y);
}

static void lin_t_e(const tn_eval* ev, const tn_linear* L, const double* gy, double* gx) {
    if (ev->tab == NULL) return lin_t(L, gy, gx);
    mac(ev->simd, L->w, L->n_out, L->n_in, 1, &gy, &gx);
}

/* The components of each part (I: 0; A: 1..3; S: 4..9) through their part's matrix, transposed or not. */
static void chan_parts(const tn_eval* ev, const tn_linear* W, int transposed, int32_t F, const double* in, double* out) {
    static const int first[3] = {0, 1, 4}, count[3] = {1, 3, 6};
    memset(out, 0, (size_t)NI * F * sizeof *out);
    for (int p = 0; p < 3; p++) {
        const double* x[TN_MAC_COLS];
        double* y[TN_MAC_COLS];
        for (int v = 0; v < count[p]; v++) x[v] = in + (size_t)(first[p] + v) * F, y[v] = out + (size_t)(first[p] + v) * F;
        mac(ev->simd, transposed ? W[p].w : W[p].wt, F, F, count[p], x, y);
    }
}

static void chan_lin3_e(const tn_eval* ev, const tn_linear* W, int32_t F, const double* T, double* out) {
    if (ev->tab == NULL) return chan_lin3(W, F, T, out);
    chan_parts(ev, W, 0, F, T, out);
}

static void chan_lin3_t_e(const tn_eval* ev, const tn_linear* W, int32_t F, const double* gout, double* gT) {
    if (ev->tab == NULL) return chan_lin3_t(W, F, gout, gT);
    chan_parts(ev, W, 1, F, gout, gT);
}

static size_t edge_of(const tn_eval* ev, int32_t i) { return (size_t)ev->nl->start[i] + (size_t)i; }

static int edge_on(const tn_member* m, double d) { return d >= m->cl && d < m->cu; }

static double* scratch(const tn_eval* ev, int32_t thread) { return ev->scratch + (size_t)thread * ev->scratch_n; }

/* An edge's geometry: neighbour j, distance d and u = (r_i - r_j) / d; k < 0 is the self loop. */
static int32_t edge_geometry(const tn_eval* ev, int32_t i, int32_t k, double* d, double u[3]) {
    if (k < 0) {
        *d = 0, u[0] = u[1] = u[2] = 0;
        return i;
    }
    const nnp_neighbor* it = &ev->nl->items[k];
    *d = it->d;
    for (int c = 0; c < 3; c++) u[c] = -it->r[c] / it->d;
    return it->j;
}

/* The interaction layer's radial MLP: fac = SiLU(L₃ SiLU(L₂ SiLU(L₁ rbf))) · C(d) (3F, blocks I, A, S).
   keep (7F + 2R): rbf R, drbf R, h1 F, h2 2F, h3 3F, the pre-activations for the backward pass. */
static void edge_mlp(const tn_member* m, const tn_linear* lls, double d, double* fac, double* keep, double* a) {
    int32_t F = m->F, R = m->R;
    double *rb = keep, *drb = keep + R, *h1 = drb + R, *h2 = h1 + F, *h3 = h2 + 2 * F;
    double c, dc;
    rbf(m, d, rb, drb);
    cutoff(m, d, &c, &dc);
    lin(&lls[0], rb, h1);
    for (int32_t k = 0; k < F; k++) a[k] = tn_act(m->activation, h1[k]);
    lin(&lls[1], a, h2);
    for (int32_t k = 0; k < 2 * F; k++) a[k] = tn_act(m->activation, h2[k]);
    lin(&lls[2], a, h3);
    for (int32_t k = 0; k < 3 * F; k++) fac[k] = tn_act(m->activation, h3[k]) * c;
}

/* dE/dd of the radial MLP given dE/dfac; keep as left by edge_mlp; work 5F. */
static double edge_mlp_back(const tn_member* m, const tn_linear* lls, double d, const double* gfac,
                            const double* keep, double* work) {
    int32_t F = m->F, R = m->R;
    const double *drb = keep + R, *h1 = drb + R, *h2 = h1 + F, *h3 = h2 + 2 * F;
    double c, dc;
    cutoff(m, d, &c, &dc);
    double *g3 = work, *g2 = work + 3 * F; /* 3F and 2F; g1 (F) reuses g3 */
    double gc = 0;
    for (int32_t k = 0; k < 3 * F; k++) {
        double s = tn_act(m->activation, h3[k]);
        gc += gfac[k] * s;
        g3[k] = gfac[k] * c * tn_act_d(m->activation, h3[k]);
    }
    memset(g2, 0, (size_t)2 * F * sizeof *g2);
    lin_t(&lls[2], g3, g2);
    for (int32_t k = 0; k < 2 * F; k++) g2[k] *= tn_act_d(m->activation, h2[k]);
    double* g1 = g3; /* g3 is done */
    memset(g1, 0, (size_t)F * sizeof *g1);
    lin_t(&lls[1], g2, g1);
    for (int32_t k = 0; k < F; k++) g1[k] *= tn_act_d(m->activation, h1[k]);
    double gd = gc * dc;
    const tn_linear no_bias = {.n_in = R, .n_out = F, .wt = lls[0].wt};
    double* t = g2; /* g2 is done: W₁ drb */
    lin(&no_bias, drb, t);
    for (int32_t o = 0; o < F; o++) gd += g1[o] * t[o];
    return gd;
}

static void st_z(void* p, int32_t i, int32_t thread) {
    tn_eval* ev = p;
    const tn_member* m = ev->m;
    size_t F = ev->F;
    const double* e = m->emb + (size_t)ev->plan->atomic_numbers[i] * F;
    double* zp = ev->Zp + i * F;
    double* zq = ev->Zq + i * F;
    (void)thread;
    memcpy(zp, m->emb2.b, F * sizeof *zp);
    memset(zq, 0, F * sizeof *zq);
    for (size_t k = 0; k < F; k++) {
        const double *wp = m->emb2.wt + k * F, *wq = m->emb2.wt + (F + k) * F;
        for (size_t o = 0; o < F; o++) zp[o] += wp[o] * e[k], zq[o] += wq[o] * e[k];
    }
}

/* The embedding's edge sum Xe_i (9F). s: R + 5F. */
static void embed_sum(const tn_eval* ev, int32_t i, double* Xe, double* s) {
    const tn_member* m = ev->m;
    int32_t F = m->F;
    double *rb = s, *C = s + m->R, *w = C + F; /* w: 3F */
    memset(Xe, 0, (size_t)9 * F * sizeof *Xe);
    int32_t k0 = ev->nl->start[i], k1 = ev->nl->start[i + 1];
    for (int32_t k = k0 - 1; k < k1; k++) {
        double d, u[3];
        int32_t j = edge_geometry(ev, i, k < k0 ? -1 : k, &d, u);
        if (k >= k0 && !edge_on(m, d)) continue;
        const double *zp = ev->Zp + (size_t)i * F, *zq = ev->Zq + (size_t)j * F;
        if (ev->tab) {
            table_at(ev->tab, 0, k < k0, d, w, NULL);
            for (int q = 0; q < 3; q++)
                for (int32_t f = 0; f < F; f++) w[q * F + f] *= zp[f] + zq[f];
        } else {
            double c, dc;
            rbf(m, d, rb, NULL);
            cutoff(m, d, &c, &dc);
            if (c == 0) continue;
            for (int32_t f = 0; f < F; f++) C[f] = c * (zp[f] + zq[f]);
            for (int q = 0; q < 3; q++) {
                lin(&m->dp[q], rb, w + q * F);
                for (int32_t f = 0; f < F; f++) w[q * F + f] *= C[f];
            }
        }
        double uu = u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
        for (int32_t f = 0; f < F; f++) {
            double w1 = w[f], w2 = w[F + f], w3 = w[2 * F + f];
            double v0 = w2 * u[0], v1 = w2 * u[1], v2 = w2 * u[2];
            /* w1 Id + skew(v) + w3 (u uᵀ - |u|²/3 Id); skew(v) = [[0,-v2,v1],[v2,0,-v0],[-v1,v0,0]] */
            for (int r = 0; r < 3; r++)
                for (int q = 0; q < 3; q++) Xe[(r * 3 + q) * F + f] += w3 * u[r] * u[q];
            double diag = w1 - w3 * uu / 3;
            Xe[0 * F + f] += diag, Xe[4 * F + f] += diag, Xe[8 * F + f] += diag;
            Xe[1 * F + f] -= v2, Xe[3 * F + f] += v2;
            Xe[2 * F + f] += v1, Xe[6 * F + f] -= v1;
            Xe[5 * F + f] -= v0, Xe[7 * F + f] += v0;
        }
    }
}

/* The embedding's per-atom part: from Xe to X (9F). Keeps its intermediates in s for the backward
   pass: T 10F, tn F, xhat F, h1 2F, h2 3F, nrm 3F, WT 10F, rstd 1, work 10F (40F + 1). */
static void embed_atom(const tn_eval* ev, const double* Xe, double* X, double* s) {
    const tn_member* m = ev->m;
    int32_t F = m->F;
    double *T = s, *tn = T + 10 * F, *xhat = tn + F, *h1 = xhat + F, *h2 = h1 + 2 * F, *nrm = h2 + 3 * F,
           *WT = nrm + 3 * F, *rstd = WT + 10 * F, *work = rstd + 1;
    decompose(F, Xe, T);
    tnorm(F, Xe, tn);
    layer_norm(F, tn, m->init_w, m->init_b, work, xhat, rstd);
    lin_e(ev, &m->els[0], work, h1);
    for (int32_t k = 0; k < 2 * F; k++) work[k] = tn_act(m->activation, h1[k]);
    lin_e(ev, &m->els[1], work, h2);
    for (int32_t k = 0; k < 3 * F; k++) nrm[k] = tn_act(m->activation, h2[k]);
    chan_lin3_e(ev, m->elt, F, T, WT);
    double* Xirr = work;
    for (int c = 0; c < NI; c++)
        for (int32_t f = 0; f < F; f++) Xirr[c * F + f] = nrm[tn_part[c] * F + f] * WT[c * F + f];
    compose(F, Xirr, X);
}

static void st_embed(void* p, int32_t i, int32_t thread) {
    tn_eval* ev = p;
    double* s = scratch(ev, thread);
    double* Xe = ev->Xe + (size_t)i * 9 * ev->F;
    embed_sum(ev, i, Xe, s);
    embed_atom(ev, Xe, ev->X + (size_t)i * 9 * ev->F, s);
}

/* Layer part A: X ← X / (|X|² + 1) (per channel), Y = W₀(I) + W₁(A) + W₂(S) as irreducible parts. */
static void normalize(int32_t F, const double* X, double* Xn) {
    for (int32_t f = 0; f < F; f++) {
        double nx = 1;
        for (int c = 0; c < 9; c++) nx += X[c * F + f] * X[c * F + f];
        for (int c = 0; c < 9; c++) Xn[c * F + f] = X[c * F + f] / nx;
    }
}

static void st_layer_a(void* p, int32_t i, int32_t thread) {
    tn_eval* ev = p;
    const tn_member* m = ev->m;
    int32_t F = m->F;
    size_t at = (size_t)ev->layer * ev->n + i;
    double *Xn = scratch(ev, thread), *T = Xn + 9 * F;
    normalize(F, ev->X + at * 9 * F, Xn);
    decompose(F, Xn, T);
    chan_lin3_e(ev, m->llt[ev->layer], F, T, ev->Yirr + at * NI * F);
}

/* Layer part B: messages, the product with Y, normalization, the update of X. */
static void st_layer_b(void* p, int32_t i, int32_t thread) {
    tn_eval* ev = p;
    const tn_member* m = ev->m;
    int32_t F = m->F, l = ev->layer;
    size_t at = (size_t)l * ev->n + i, F10 = (size_t)NI * F;
    double* s = scratch(ev, thread);
    double *fac = s, *keep = fac + 3 * F, *a = keep + 7 * F + 2 * m->R, *msg = a + 3 * F, *Y = msg + 9 * F,
           *Cn = Y + 9 * F, *T = Cn + 9 * F, *D = T + 10 * F, *Xn = D + 10 * F;
    double* Mi = ev->Mirr + at * F10;
    memset(Mi, 0, F10 * sizeof *Mi);
    int32_t k0 = ev->nl->start[i], k1 = ev->nl->start[i + 1];
    const size_t e0 = edge_of(ev, i), KW = (size_t)7 * F + 2 * (size_t)m->R;
    for (int32_t k = k0 - 1; k < k1; k++) {
        double d, u[3];
        int32_t j = edge_geometry(ev, i, k < k0 ? -1 : k, &d, u);
        if (k >= k0 && !edge_on(m, d)) continue;
        if (ev->tab) {
            table_at(ev->tab, 1 + l, k < k0, d, fac, NULL);
        } else {
            if (ev->kept) {
                const size_t e = (size_t)l * ev->n_edges + e0 + (size_t)(k - k0 + 1);
                fac = ev->kept_fac + e * 3 * F, keep = ev->kept + e * KW;
            }
            edge_mlp(m, m->lls[l], d, fac, keep, a);
        }
        const double* Yj = ev->Yirr + ((size_t)l * ev->n + j) * F10;
        for (int c = 0; c < NI; c++) {
            const double* fp = fac + (size_t)tn_part[c] * F;
            for (int32_t f = 0; f < F; f++) Mi[c * F + f] += fp[f] * Yj[c * F + f];
        }
    }
    compose(F, Mi, msg);
    compose(F, ev->Yirr + at * F10, Y);
    double* B = ev->B + at * 9 * F;
    memset(B, 0, (size_t)9 * F * sizeof *B);
    double cq = ev->cq[i];
    if (m->group == TN_GROUP_O3) {
        matmul_add(F, cq, msg, Y, B);
        matmul_add(F, cq, Y, msg, B);
    } else {
        matmul_add(F, 2, Y, msg, B);
    }
    normalize(F, B, Cn);
    decompose(F, Cn, T);
    chan_lin3_e(ev, m->llt[l] + 3, F, T, D);
    double* dX = ev->dX + at * 9 * F;
    compose(F, D, dX);
    normalize(F, ev->X + at * 9 * F, Xn);
    double* Xo = ev->X + ((size_t)(l + 1) * ev->n + i) * 9 * F;
    for (int c = 0; c < 9; c++)
        for (int32_t f = 0; f < F; f++) Xo[c * F + f] = Xn[c * F + f] + dX[c * F + f];
    matmul_add(F, cq, dX, dX, Xo);
}

/* The output: x = LayerNorm(3|I|², |A|², |S|²), h = SiLU(W x + b), the head, · std + atomref.
   Returns the atom's energy; with g != NULL, also dE/dX (9F) into g. */
static double out_atom(const tn_eval* ev, int32_t i, double* s, double* g) {
    const tn_member* m = ev->m;
    int32_t F = m->F, H = m->n_head;
    const double* X = ev->X + ((size_t)m->L * ev->n + i) * 9 * F;
    double *T = s, *x = T + 10 * F, *xhat = x + 3 * F, *y = xhat + 3 * F, *yl = y + 3 * F, *h = yl + F,
           *outs = h + F;
    double rstd;
    decompose(F, X, T);
    for (int32_t f = 0; f < F; f++) {
        double t[NI];
        for (int c = 0; c < NI; c++) t[c] = T[c * F + f];
        x[f] = 3 * t[0] * t[0];
        x[F + f] = 2 * (t[1] * t[1] + t[2] * t[2] + t[3] * t[3]);
        x[2 * F + f] = t[4] * t[4] + t[5] * t[5] + t[6] * t[6] + 2 * (t[7] * t[7] + t[8] * t[8] + t[9] * t[9]);
    }
    layer_norm(3 * F, x, m->out_w, m->out_b, y, xhat, &rstd);
    lin_e(ev, &m->linear, y, yl);
    for (int32_t k = 0; k < F; k++) h[k] = tn_act(m->activation, yl[k]);
    /* head: outs holds each layer's pre-activation; the input of layer k > 0 is SiLU of k - 1's */
    double* o = outs;
    const double* in = h;
    double* act = NULL;
    size_t head_total = 0;
    for (int32_t k = 0; k < H; k++) head_total += (size_t)m->head[k].n_out;
    double* acts = outs + head_total; /* activations, same sizes */
    for (int32_t k = 0; k < H; k++) {
        lin_e(ev, &m->head[k], in, o);
        act = acts + (o - outs);
        if (k < H - 1)
            for (int32_t c = 0; c < m->head[k].n_out; c++) act[c] = tn_act(m->activation, o[c]);
        in = act;
        o += m->head[k].n_out;
    }
    double e = o[-1] * m->std + (m->atomref ? m->atomref[ev->plan->atomic_numbers[i]] : 0);
    if (g == NULL) return e;
    /* backward: gradients in two buffers after the activations */
    double *ga = acts + head_total, *gb = ga + (TN_MAX_WIDTH > 3 * F ? TN_MAX_WIDTH : 3 * F);
    ga[0] = m->std; /* dE/d(pre-activation of the last layer) */
    for (int32_t k = H - 1; k >= 0; k--) {
        o -= m->head[k].n_out;
        int32_t n_in = m->head[k].n_in;
        memset(gb, 0, (size_t)n_in * sizeof *gb);
        lin_t_e(ev, &m->head[k], ga, gb); /* dE/d(input of layer k) */
        if (k > 0) {
            const double* prev = o - m->head[k - 1].n_out;
            for (int32_t c = 0; c < n_in; c++) ga[c] = gb[c] * tn_act_d(m->activation, prev[c]);
        } else {
            for (int32_t c = 0; c < n_in; c++) ga[c] = gb[c] * tn_act_d(m->activation, yl[c]);
        }
    }
    memset(gb, 0, (size_t)3 * F * sizeof *gb);
    lin_t_e(ev, &m->linear, ga, gb);
    layer_norm_back(3 * F, xhat, rstd, m->out_w, gb, ga); /* ga: dE/dx */
    double* gT = gb;
    for (int32_t f = 0; f < F; f++) {
        gT[f] = 6 * T[f] * ga[f];
        for (int c = 1; c <= 3; c++) gT[c * F + f] = 4 * T[c * F + f] * ga[F + f];
        for (int c = 4; c <= 6; c++) gT[c * F + f] = 2 * T[c * F + f] * ga[2 * F + f];
        for (int c = 7; c <= 9; c++) gT[c * F + f] = 4 * T[c * F + f] * ga[2 * F + f];
    }
    decompose_adj(F, gT, g);
    return e;
}

static void st_out(void* p, int32_t i, int32_t thread) {
    tn_eval* ev = p;
    ev->energy[i] = out_atom(ev, i, scratch(ev, thread), ev->forces ? ev->gX + (size_t)i * 9 * ev->F : NULL);
}

/* Layer backward part 1, atom i: from dE/dX_out (gX) to dE/dM_i (gM, irreducible parts), the direct
   dE/dY_i (gY), the radial MLP's factors of i's edges (fac) and dE/dd of i's edges. */
static void st_b1(void* p, int32_t i, int32_t thread) {
    tn_eval* ev = p;
    const tn_member* m = ev->m;
    int32_t F = m->F, l = ev->layer;
    size_t at = (size_t)l * ev->n + i, F10 = (size_t)NI * F, F9 = (size_t)9 * F;
    double* s = scratch(ev, thread);
    double *gdX = s, *t10 = gdX + 9 * F, *gT = t10 + 10 * F, *gCn = gT + 10 * F, *gB = gCn + 9 * F,
           *msg = gB + 9 * F, *Y = msg + 9 * F, *gmsg = Y + 9 * F, *gYf = gmsg + 9 * F, *fac = gYf + 9 * F,
           *keep = fac + 3 * F, *a = keep + 7 * F + 2 * m->R, *gfac = a + 3 * F, *work = gfac + 3 * F,
           *tslope = work + 5 * F;
    const double *gXo = ev->gX + (size_t)i * F9, *dX = ev->dX + at * F9, *B = ev->B + at * F9;
    double cq = ev->cq[i];
    memcpy(gdX, gXo, F9 * sizeof *gdX);
    matmul_nt_add(F, cq, gXo, dX, gdX);
    matmul_tn_add(F, cq, dX, gXo, gdX);
    compose_adj(F, gdX, t10);
    chan_lin3_t_e(ev, m->llt[l] + 3, F, t10, gT);
    decompose_adj(F, gT, gCn);
    for (int32_t f = 0; f < F; f++) {
        double nc = 1, dot = 0;
        for (int c = 0; c < 9; c++) nc += B[c * F + f] * B[c * F + f], dot += gCn[c * F + f] * B[c * F + f];
        for (int c = 0; c < 9; c++) gB[c * F + f] = gCn[c * F + f] / nc - 2 * B[c * F + f] * dot / (nc * nc);
    }
    compose(F, ev->Mirr + at * F10, msg);
    compose(F, ev->Yirr + at * F10, Y);
    memset(gmsg, 0, F9 * sizeof *gmsg);
    memset(gYf, 0, F9 * sizeof *gYf);
    if (m->group == TN_GROUP_O3) {
        matmul_nt_add(F, cq, gB, Y, gmsg);
        matmul_tn_add(F, cq, Y, gB, gmsg);
        matmul_tn_add(F, cq, msg, gB, gYf);
        matmul_nt_add(F, cq, gB, msg, gYf);
    } else {
        matmul_nt_add(F, 2, gB, msg, gYf);
        matmul_tn_add(F, 2, Y, gB, gmsg);
    }
    double* gMi = ev->gM + (size_t)i * F10;
    compose_adj(F, gmsg, gMi);
    compose_adj(F, gYf, ev->gY + (size_t)i * F10);
    int32_t k0 = ev->nl->start[i], k1 = ev->nl->start[i + 1];
    size_t e0 = edge_of(ev, i);
    for (int32_t k = k0 - 1; k < k1; k++) {
        double d, u[3];
        int32_t j = edge_geometry(ev, i, k < k0 ? -1 : k, &d, u);
        if (k >= k0 && !edge_on(m, d)) continue;
        size_t e = e0 + (size_t)(k - k0 + 1);
        if (ev->tab) {
            if (k < k0) continue; /* the self loop does not move */
            table_at(ev->tab, 1 + l, 0, d, NULL, tslope); /* the slopes alone */
        } else if (ev->kept) {
            keep = ev->kept + ((size_t)l * ev->n_edges + e) * (7 * (size_t)F + 2 * (size_t)m->R);
        } else {
            edge_mlp(m, m->lls[l], d, ev->fac + e * 3 * F, keep, a);
        }
        if (k < k0) continue; /* the self loop does not move */
        const double* Yj = ev->Yirr + ((size_t)l * ev->n + j) * F10;
        memset(gfac, 0, (size_t)3 * F * sizeof *gfac);
        for (int c = 0; c < NI; c++) {
            double* gp = gfac + (size_t)tn_part[c] * F;
            for (int32_t f = 0; f < F; f++) gp[f] += gMi[c * F + f] * Yj[c * F + f];
        }
        if (ev->tab) {
            double gd = 0;
            for (int32_t c = 0; c < 3 * F; c++) gd += gfac[c] * tslope[c];
            ev->gd[e] += gd;
        } else {
            ev->gd[e] += edge_mlp_back(m, m->lls[l], d, gfac, keep, work);
        }
    }
}

/* Layer backward part 2, atom j: dE/dY_j from every message that read Y_j, then dE/dX_in. */
static void st_b2(void* p, int32_t j, int32_t thread) {
    tn_eval* ev = p;
    const tn_member* m = ev->m;
    int32_t F = m->F, l = ev->layer;
    size_t at = (size_t)l * ev->n + j, F10 = (size_t)NI * F, F9 = (size_t)9 * F;
    double* s = scratch(ev, thread);
    double *gYt = s, *gT = gYt + 10 * F, *gXn = gT + 10 * F, *tfac = gXn + 9 * F;
    memcpy(gYt, ev->gY + (size_t)j * F10, F10 * sizeof *gYt);
    int32_t k0 = ev->nl->start[j], k1 = ev->nl->start[j + 1];
    size_t e0 = edge_of(ev, j);
    for (int32_t k = k0 - 1; k < k1; k++) {
        double d, u[3];
        int32_t i = edge_geometry(ev, j, k < k0 ? -1 : k, &d, u);
        if (k >= k0 && !edge_on(m, d)) continue;
        /* the factor of edge (j, i) equals that of (i, j): the same distance */
        const double* fe = tfac;
        if (ev->tab) table_at(ev->tab, 1 + l, k < k0, d, tfac, NULL);
        else fe = ev->fac + (e0 + (size_t)(k - k0 + 1)) * 3 * F;
        const double* gMi = ev->gM + (size_t)i * F10;
        for (int c = 0; c < NI; c++) {
            const double* fp = fe + (size_t)tn_part[c] * F;
            for (int32_t f = 0; f < F; f++) gYt[c * F + f] += fp[f] * gMi[c * F + f];
        }
    }
    chan_lin3_t_e(ev, m->llt[l], F, gYt, gT);
    decompose_adj(F, gT, gXn);
    double* gX = ev->gX + (size_t)j * F9;
    const double* X = ev->X + at * F9;
    for (int32_t f = 0; f < F; f++) {
        double nx = 1, dot = 0;
        for (int c = 0; c < 9; c++) {
            double g = gX[c * F + f] + gXn[c * F + f]; /* Xout = Xn + ...: the direct path */
            gXn[c * F + f] = g;
            nx += X[c * F + f] * X[c * F + f];
            dot += g * X[c * F + f];
        }
        for (int c = 0; c < 9; c++) gX[c * F + f] = gXn[c * F + f] / nx - 2 * X[c * F + f] * dot / (nx * nx);
    }
}

/* Embedding backward, atom i: from dE/dX (gX) to dE/dd and dE/du of i's edges. */
static void st_embed_back(void* p, int32_t i, int32_t thread) {
    tn_eval* ev = p;
    const tn_member* m = ev->m;
    int32_t F = m->F, R = m->R;
    double* s = scratch(ev, thread);
    double* keep = s; /* embed_atom's 40F + 1 */
    double *T = keep, *xhat = T + 11 * F, *h1 = xhat + F, *h2 = h1 + 2 * F, *nrm = h2 + 3 * F, *WT = nrm + 3 * F,
           *rstd = WT + 10 * F;
    double *Xtmp = keep + 40 * F + 1, *gXirr = Xtmp + 9 * F, *gn = gXirr + 10 * F, *gWT = gn + 3 * F,
           *gT = gWT + 10 * F, *g2 = gT + 10 * F, *g1 = g2 + 3 * F, *gln = g1 + 2 * F, *gtn = gln + F,
           *gXe = gtn + F, *rb = gXe + 9 * F, *drb = rb + R, *grb = drb + R, *C = grb + R, *pk = C + F,
           *gp = pk + 3 * F, *ps = gp + 3 * F;
    const double* Xe = ev->Xe + (size_t)i * 9 * F;
    embed_atom(ev, Xe, Xtmp, keep);
    compose_adj(F, ev->gX + (size_t)i * 9 * F, gXirr);
    memset(gn, 0, (size_t)3 * F * sizeof *gn);
    for (int c = 0; c < NI; c++) {
        int q = tn_part[c];
        for (int32_t f = 0; f < F; f++) {
            gn[q * F + f] += gXirr[c * F + f] * WT[c * F + f];
            gWT[c * F + f] = nrm[q * F + f] * gXirr[c * F + f];
        }
    }
    chan_lin3_t_e(ev, m->elt, F, gWT, gT);
    for (int32_t k = 0; k < 3 * F; k++) gn[k] *= tn_act_d(m->activation, h2[k]);
    memset(g1, 0, (size_t)2 * F * sizeof *g1);
    lin_t_e(ev, &m->els[1], gn, g1);
    for (int32_t k = 0; k < 2 * F; k++) g1[k] *= tn_act_d(m->activation, h1[k]);
    memset(gln, 0, (size_t)F * sizeof *gln);
    lin_t_e(ev, &m->els[0], g1, gln);
    layer_norm_back(F, xhat, *rstd, m->init_w, gln, gtn);
    decompose_adj(F, gT, gXe);
    for (int c = 0; c < 9; c++)
        for (int32_t f = 0; f < F; f++) gXe[c * F + f] += 2 * Xe[c * F + f] * gtn[f];
    (void)g2;
    int32_t k0 = ev->nl->start[i], k1 = ev->nl->start[i + 1];
    size_t e0 = edge_of(ev, i);
    const double* zp = ev->Zp + (size_t)i * F;
    for (int32_t k = k0; k < k1; k++) {
        double d, u[3];
        int32_t j = edge_geometry(ev, i, k, &d, u);
        if (!edge_on(m, d)) continue;
        double c = 1, dc = 0; /* with tables, pk holds dp_q(rbf) · C and ps its slopes */
        if (ev->tab) {
            table_at(ev->tab, 0, 0, d, pk, ps);
        } else {
            rbf(m, d, rb, drb);
            cutoff(m, d, &c, &dc);
            for (int q = 0; q < 3; q++) lin_e(ev, &m->dp[q], rb, pk + q * F);
        }
        const double* zq = ev->Zq + (size_t)j * F;
        double uu = u[0] * u[0] + u[1] * u[1] + u[2] * u[2];
        double gu[3] = {0, 0, 0}, gcut = 0, gtab = 0;
        for (int32_t f = 0; f < F; f++) {
            double G[9];
            for (int q = 0; q < 9; q++) G[q] = gXe[q * F + f];
            double zij = zp[f] + zq[f], Cf = c * zij;
            double w2 = pk[F + f] * Cf, w3 = pk[2 * F + f] * Cf;
            double tr = G[0] + G[4] + G[8];
            double gv[3] = {G[7] - G[5], G[2] - G[6], G[3] - G[1]};
            double Gu[3];
            for (int r = 0; r < 3; r++)
                Gu[r] = (G[r * 3 + 0] + G[0 * 3 + r]) * u[0] + (G[r * 3 + 1] + G[1 * 3 + r]) * u[1] +
                        (G[r * 3 + 2] + G[2 * 3 + r]) * u[2];
            double uGu = 0.5 * (Gu[0] * u[0] + Gu[1] * u[1] + Gu[2] * u[2]);
            double gw1 = tr, gw2 = gv[0] * u[0] + gv[1] * u[1] + gv[2] * u[2], gw3 = uGu - uu * tr / 3;
            for (int r = 0; r < 3; r++) gu[r] += w2 * gv[r] + w3 * (Gu[r] - 2.0 / 3.0 * u[r] * tr);
            if (ev->tab) {
                gtab += zij * (gw1 * ps[f] + gw2 * ps[F + f] + gw3 * ps[2 * F + f]);
                continue;
            }
            gp[f] = gw1 * Cf, gp[F + f] = gw2 * Cf, gp[2 * F + f] = gw3 * Cf;
            double gC = gw1 * pk[f] + gw2 * pk[F + f] + gw3 * pk[2 * F + f];
            gcut += gC * zij;
        }
        double gd = gtab;
        if (!ev->tab) {
            memset(grb, 0, (size_t)R * sizeof *grb);
            for (int q = 0; q < 3; q++) lin_t_e(ev, &m->dp[q], gp + q * F, grb);
            gd = gcut * dc;
            for (int32_t r = 0; r < R; r++) gd += grb[r] * drb[r];
        }
        size_t e = e0 + (size_t)(k - k0 + 1);
        ev->gd[e] += gd;
        for (int r = 0; r < 3; r++) ev->gu[e * 3 + r] += gu[r];
    }
    (void)C;
}

/* Adds member m's energies (× scale) and, with grad, its gradient (× scale). */
static nnp_status tn_member_eval(const tn_member* m, const tn_table* tab, nnp_plan* plan, const nnp_neighbors* nl,
                                 const double* cq, int32_t n_threads, double scale, double* atom_energy,
                                 double* batch_energy, double* grad) {
    int32_t n = plan->n_atoms;
    size_t F = (size_t)m->F, L = (size_t)m->L, E = (size_t)nl->start[n] + (size_t)n, N = (size_t)n;
    size_t head_total = 0;
    for (int32_t k = 0; k < m->n_head; k++) head_total += (size_t)m->head[k].n_out;
    size_t wide = TN_MAX_WIDTH > 3 * F ? TN_MAX_WIDTH : 3 * F;
    tn_eval ev = {.m = m, .plan = plan, .nl = nl, .n = n, .forces = grad != NULL, .F = F, .cq = cq, .tab = tab,
                  .simd = plan->cpu_simd == NNP_CPU_SIMD_AUTO ? (int)nnp_cpu_simd_available() : plan->cpu_simd};
    ev.scratch_n = 128 * F + 4 * (size_t)m->R + 2 * head_total + 2 * wide + 64;
    int forces = grad != NULL;
    const size_t KW = 7 * F + 2 * (size_t)m->R;
    const int keep = forces && tab == NULL && L > 0 && (double)L * (double)E * (double)(3 * F + KW) * sizeof(double) <= TN_KEEP_BYTES;
    ev.n_edges = E;
    size_t sizes[] = {N * F,           N * F,      N * 9 * F,  (L + 1) * N * 9 * F, L * N * 10 * F, L * N * 10 * F,
                      L * N * 9 * F,   L * N * 9 * F, N * 9 * F, N * 10 * F,     N * 10 * F,
                      forces && !keep && !tab ? E * 3 * F : 0, forces ? E : 0, forces ? 3 * E : 0, N,
                      (size_t)n_threads * ev.scratch_n, keep ? L * E * 3 * F : 0, keep ? L * E * KW : 0};
    double** slots[] = {&ev.Zp, &ev.Zq, &ev.Xe, &ev.X, &ev.Yirr, &ev.Mirr, &ev.B,  &ev.dX,
                        &ev.gX, &ev.gM, &ev.gY, &ev.fac, &ev.gd, &ev.gu, &ev.energy, &ev.scratch,
                        &ev.kept_fac, &ev.kept};
    enum { n_slots = sizeof slots / sizeof slots[0] };
    size_t total = 0;
    for (int k = 0; k < n_slots; k++) total += sizes[k];
    double* block = calloc(total + 1, sizeof *block);
    if (block == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory for TensorNet on %d atoms", n);
    double* next = block;
    for (int k = 0; k < n_slots; k++) *slots[k] = next, next += sizes[k];
    if (!keep) ev.kept_fac = ev.kept = NULL;

    nnp_parallel_for(n_threads, n, st_z, &ev);
    nnp_parallel_for(n_threads, n, st_embed, &ev);
    for (int32_t l = 0; l < m->L; l++) {
        ev.layer = l;
        nnp_parallel_for(n_threads, n, st_layer_a, &ev);
        nnp_parallel_for(n_threads, n, st_layer_b, &ev);
    }
    nnp_parallel_for(n_threads, n, st_out, &ev);
    for (int32_t i = 0; i < n; i++) atom_energy[i] += scale * ev.energy[i];
    for (int32_t b = 0; b < plan->n_batches; b++)
        if (plan->batch_start[b + 1] > plan->batch_start[b]) batch_energy[b] += scale * m->mean;
    if (forces) {
        for (int32_t l = m->L - 1; l >= 0; l--) {
            ev.layer = l;
            if (keep) ev.fac = ev.kept_fac + (size_t)l * E * 3 * F; /* what st_b2 reads */
            nnp_parallel_for(n_threads, n, st_b1, &ev);
            nnp_parallel_for(n_threads, n, st_b2, &ev);
        }
        nnp_parallel_for(n_threads, n, st_embed_back, &ev);
        /* d and u of edge (i, j) as functions of r_i and r_j, in atom and edge order */
        for (int32_t i = 0; i < n; i++) {
            size_t e0 = edge_of(&ev, i);
            for (int32_t k = nl->start[i]; k < nl->start[i + 1]; k++) {
                size_t e = e0 + (size_t)(k - nl->start[i] + 1);
                double gd = ev.gd[e], *gu = ev.gu + 3 * e;
                if (gd == 0 && gu[0] == 0 && gu[1] == 0 && gu[2] == 0) continue;
                const nnp_neighbor* it = &nl->items[k];
                double u[3] = {-it->r[0] / it->d, -it->r[1] / it->d, -it->r[2] / it->d};
                double gu_u = gu[0] * u[0] + gu[1] * u[1] + gu[2] * u[2];
                for (int c = 0; c < 3; c++) {
                    double g = scale * (gd * u[c] + (gu[c] - gu_u * u[c]) / it->d);
                    grad[3 * i + c] += g;
                    grad[3 * it->j + c] -= g;
                }
            }
        }
    }
    free(block);
    return NNP_OK;
}

static nnp_status tn_evaluate_cpu(nnp_plan* plan, const double* pos, const double* box, double* atom_energy,
                                  double* batch_energy, double* grad) {
    const tn_model* tm = tn_of(plan->model);
    int32_t n = plan->n_atoms;
    if (n == 0) return NNP_OK;
    for (int32_t i = 0; i < n; i++) {
        int32_t z = plan->atomic_numbers[i];
        for (int32_t k = 0; k < tm->n_members; k++)
            if (z >= tm->members[k].max_z)
                return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "atom %d: atomic number %d is beyond the TensorNet "
                                "embedding (%d rows)", i, z, tm->members[k].max_z);
    }
    nnp_neighbors nl = {0};
    nnp_status st = nnp_neighbors_build(plan, pos, box, tm->cutoff, &nl);
    if (st != NNP_OK) return st;
    double* cq = malloc((size_t)n * sizeof *cq);
    if (cq == NULL) {
        nnp_neighbors_free(&nl);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory for %d atoms", n);
    }
    for (int32_t i = 0; i < n; i++) cq[i] = 1 + 0.1 * plan->batch_charges[plan->batches[i]];
    int32_t first = plan->member < 0 ? 0 : plan->member;
    int32_t last = plan->member < 0 ? tm->n_members : plan->member + 1;
    int32_t n_threads = nnp_plan_threads(plan);
    const tn_table* tables = NULL;
    if (plan->cpu_precision == NNP_PRECISION_SINGLE) st = tables_of(plan->model, n_threads, &tables);
    if (n_threads > n) n_threads = n;
    for (int32_t k = first; st == NNP_OK && k < last; k++)
        st = tn_member_eval(&tm->members[k], tables ? &tables[k] : NULL, plan, &nl, cq, n_threads,
                            1.0 / (last - first), atom_energy, batch_energy, grad);
    free(cq);
    nnp_neighbors_free(&nl);
    return st;
}

/* Element indices are atomic numbers 1 .. n_elements: index k lists element k + 1. */
static int32_t tn_element(const nnp_model* model, int32_t index) { (void)model; return index + 1; }

const nnp_family nnp_family_tensornet = {
    .id = NNP_FAMILY_TENSORNET,
    .name = "tensornet",
    .read_payload = tn_read_payload,
    .write_payload = tn_write_payload,
    .free_data = tn_free,
    .cutoff = tn_cutoff,
    .element_index = tn_element_index,
    .check_charge = tn_check_charge,
    .evaluate_cpu = tn_evaluate_cpu,
    .element = tn_element,
#ifdef NNP_WITH_CUDA
    .evaluate_cuda = nnp_tn_evaluate_cuda,
    .cuda_check = nnp_tn_cuda_check,
    .cuda_free = nnp_tn_cuda_free,
#endif
};
