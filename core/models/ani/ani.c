/*
 * The ANI family's parameters: allocation, validation, the .nnpm payload and the family table.
 *
 * ANI's payload in the .nnpm container (core/src/nnpm.c), after the family, name and units:
 *   f64 Rcr, f64 Rca (Å)
 *   6 × (u32 n, n × f64): EtaR, ShfR, EtaA, Zeta, ShfA, ShfZ
 *   u32 element count E; E × (u32 atomic number, f64 self energy in Hartree)
 *   u32 member count M
 *   M × E networks (member-major, elements in the order above), each:
 *     u32 layer count L; L × (u32 inputs, u32 outputs, u32 activation,
 *                             inputs × outputs f32 weights (row per output), outputs f32 biases)
 */
#include "ani.h"
#include "../../src/nnpm_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ani_free_data(nnp_model* model) {
    nnp_ani* ani = nnp_ani_of(model);
    if (ani == NULL) return;
    if (ani->networks != NULL) {
        for (int32_t i = 0; i < model->n_members * model->n_elements; i++)
            for (int32_t l = 0; l < ani->networks[i].n_layers; l++) {
                free(ani->networks[i].layers[l].weights);
                free(ani->networks[i].layers[l].biases);
            }
        free(ani->networks);
    }
    free(ani);
    model->family_data = NULL;
}

nnp_model* nnp_ani_model_alloc(int32_t n_members, int32_t n_elements) {
    nnp_model* model = calloc(1, sizeof *model);
    nnp_ani* ani = calloc(1, sizeof *ani);
    nnp_network* networks = calloc((size_t)n_members * (size_t)n_elements, sizeof *networks);
    if (model == NULL || ani == NULL || networks == NULL) {
        free(model), free(ani), free(networks);
        return NULL;
    }
    model->family = &nnp_family_ani;
    model->family_data = ani;
    model->energy_to_kjmol = NNP_HARTREE_TO_KJMOL;
    model->length_to_angstrom = 1.0;
    model->n_members = n_members;
    model->n_elements = n_elements;
    ani->networks = networks;
    return model;
}

static int all_finite(const double* v, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return 0;
    return 1;
}

nnp_status nnp_ani_finish(nnp_model* model) {
    nnp_ani* ani = nnp_ani_of(model);
    nnp_aev_params* p = &ani->aev;
    if (!(p->Rcr > 0 && p->Rcr < 100) || !(p->Rca > 0 && p->Rca <= p->Rcr))
        return nnp_fail(NNP_ERR_FORMAT, "cutoffs Rcr=%g, Rca=%g are not valid (need 0 < Rca <= Rcr < 100 Å)",
                        p->Rcr, p->Rca);
    const struct { const char* name; int32_t n; const double* v; } lists[] = {
        {"EtaR", p->nEtaR, p->EtaR}, {"ShfR", p->nShfR, p->ShfR}, {"EtaA", p->nEtaA, p->EtaA},
        {"Zeta", p->nZeta, p->Zeta}, {"ShfA", p->nShfA, p->ShfA}, {"ShfZ", p->nShfZ, p->ShfZ}};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        if (lists[i].n < 1 || lists[i].n > NNP_MAX_TERMS)
            return nnp_fail(NNP_ERR_FORMAT, "AEV parameter %s has %d entries (need 1..%d)",
                            lists[i].name, lists[i].n, NNP_MAX_TERMS);
        if (!all_finite(lists[i].v, lists[i].n))
            return nnp_fail(NNP_ERR_FORMAT, "AEV parameter %s has a non-finite entry", lists[i].name);
        for (int32_t k = 0; k < lists[i].n; k++)
            if (lists[i].v[k] < 0 || lists[i].v[k] > 1e4)
                return nnp_fail(NNP_ERR_FORMAT, "AEV parameter %s has entry %g outside [0, 1e4]",
                                lists[i].name, lists[i].v[k]);
    }
    for (int32_t k = 0; k < p->nZeta; k++)
        if (p->Zeta[k] < 1) return nnp_fail(NNP_ERR_FORMAT, "AEV parameter Zeta must be >= 1, got %g", p->Zeta[k]);
    if (model->n_elements < 1 || model->n_elements > NNP_MAX_ELEMENTS)
        return nnp_fail(NNP_ERR_FORMAT, "model has %d elements (need 1..%d)", model->n_elements,
                        NNP_MAX_ELEMENTS);
    for (int32_t i = 0; i < model->n_elements; i++) {
        if (nnp_element_symbol(ani->atomic_numbers[i]) == NULL)
            return nnp_fail(NNP_ERR_FORMAT, "model element %d has unknown atomic number %d", i,
                            ani->atomic_numbers[i]);
        for (int32_t j = 0; j < i; j++)
            if (ani->atomic_numbers[i] == ani->atomic_numbers[j])
                return nnp_fail(NNP_ERR_FORMAT, "model lists element %s twice",
                                nnp_element_symbol(ani->atomic_numbers[i]));
        if (!isfinite(ani->self_energies[i]))
            return nnp_fail(NNP_ERR_FORMAT, "self energy of %s is not finite",
                            nnp_element_symbol(ani->atomic_numbers[i]));
    }
    int32_t ne = model->n_elements;
    ani->radial_sub = p->nEtaR * p->nShfR;
    ani->angular_sub = p->nEtaA * p->nZeta * p->nShfA * p->nShfZ;
    ani->radial_length = ne * ani->radial_sub;
    int64_t aev = (int64_t)ani->radial_length + (int64_t)(ne * (ne + 1) / 2) * ani->angular_sub;
    if (aev > NNP_MAX_WIDTH)
        return nnp_fail(NNP_ERR_FORMAT, "AEV length %lld exceeds %d", (long long)aev, NNP_MAX_WIDTH);
    ani->aev_length = (int32_t)aev;
    for (int32_t a = 0; a < ne; a++)
        for (int32_t b = a; b < ne; b++) /* row-major upper triangle, as TorchANI's triu_index */
            ani->pair_index[a][b] = ani->pair_index[b][a] = a * ne - a * (a - 1) / 2 + (b - a);
    return NNP_OK;
}

nnp_status nnp_ani_network_check(const nnp_model* model, const nnp_network* net, const char* what) {
    if (net->n_layers < 1 || net->n_layers > NNP_MAX_LAYERS)
        return nnp_fail(NNP_ERR_FORMAT, "%s: %d layers (need 1..%d)", what, net->n_layers, NNP_MAX_LAYERS);
    int32_t expect = nnp_ani_of(model)->aev_length;
    for (int32_t l = 0; l < net->n_layers; l++) {
        const nnp_layer* layer = &net->layers[l];
        if (layer->n_in != expect)
            return nnp_fail(NNP_ERR_FORMAT, "%s: layer %d takes %d inputs, expected %d", what, l + 1,
                            layer->n_in, expect);
        if (layer->n_out < 1 || layer->n_out > NNP_MAX_WIDTH)
            return nnp_fail(NNP_ERR_FORMAT, "%s: layer %d has %d nodes", what, l + 1, layer->n_out);
        int last = l == net->n_layers - 1;
        if (last ? layer->activation != NNP_ACT_LINEAR
                 : (layer->activation != NNP_ACT_CELU && layer->activation != NNP_ACT_LINEAR))
            return nnp_fail(NNP_ERR_FORMAT,
                            "%s: layer %d has activation %d (supported: 9 = CELU(0.1) for hidden "
                            "layers, 6 = linear)", what, l + 1, layer->activation);
        size_t nw = (size_t)layer->n_in * (size_t)layer->n_out;
        for (size_t i = 0; i < nw; i++)
            if (!isfinite(layer->weights[i]))
                return nnp_fail(NNP_ERR_FORMAT, "%s: layer %d has a non-finite weight", what, l + 1);
        for (int32_t i = 0; i < layer->n_out; i++)
            if (!isfinite(layer->biases[i]))
                return nnp_fail(NNP_ERR_FORMAT, "%s: layer %d has a non-finite bias", what, l + 1);
        expect = layer->n_out;
    }
    if (expect != 1)
        return nnp_fail(NNP_ERR_FORMAT, "%s: last layer has %d outputs, expected 1", what, expect);
    return NNP_OK;
}

static int32_t ani_element_index(const nnp_model* model, int32_t atomic_number) {
    const nnp_ani* ani = nnp_ani_of(model);
    for (int32_t i = 0; i < model->n_elements; i++)
        if (ani->atomic_numbers[i] == atomic_number) return i;
    return -1;
}

static int32_t ani_element(const nnp_model* model, int32_t index) { return nnp_ani_of(model)->atomic_numbers[index]; }

int32_t nnp_model_aev_length(const nnp_model* model) {
    return model && model->family == &nnp_family_ani ? nnp_ani_of(model)->aev_length : 0;
}

nnp_status nnp_model_self_energy(const nnp_model* model, int32_t atomic_number, double* hartree) {
    if (model == NULL || hartree == NULL)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_model_self_energy: NULL argument");
    if (model->family != &nnp_family_ani)
        return nnp_fail(NNP_ERR_UNSUPPORTED, "model '%s' is a %s model: self energies are ANI's", model->name,
                        model->family->name);
    int32_t e = ani_element_index(model, atomic_number);
    if (e < 0)
        return nnp_fail(NNP_ERR_ELEMENT, "model '%s' has no element with atomic number %d",
                        model->name, atomic_number);
    *hartree = nnp_ani_of(model)->self_energies[e];
    return NNP_OK;
}

/* ------------------------------------------------------------------ payload */

static void put_list(writer* w, const double* v, int32_t n) {
    put_u32(w, (uint32_t)n);
    for (int32_t i = 0; i < n; i++) put_f64(w, v[i]);
}

static nnp_status get_list(reader* r, const char* name, double* v, int32_t* n) {
    uint32_t count = get_u32(r);
    if (count < 1 || count > NNP_MAX_TERMS)
        return nnp_fail(NNP_ERR_FORMAT, "model file: %s has %u entries", name, count);
    *n = (int32_t)count;
    for (uint32_t i = 0; i < count; i++) v[i] = get_f64(r);
    return NNP_OK;
}

static void ani_write_payload(writer* w, const nnp_model* model) {
    const nnp_ani* ani = nnp_ani_of(model);
    const nnp_aev_params* p = &ani->aev;
    put_f64(w, p->Rcr);
    put_f64(w, p->Rca);
    put_list(w, p->EtaR, p->nEtaR);
    put_list(w, p->ShfR, p->nShfR);
    put_list(w, p->EtaA, p->nEtaA);
    put_list(w, p->Zeta, p->nZeta);
    put_list(w, p->ShfA, p->nShfA);
    put_list(w, p->ShfZ, p->nShfZ);
    put_u32(w, (uint32_t)model->n_elements);
    for (int32_t e = 0; e < model->n_elements; e++) {
        put_u32(w, (uint32_t)ani->atomic_numbers[e]);
        put_f64(w, ani->self_energies[e]);
    }
    put_u32(w, (uint32_t)model->n_members);
    for (int32_t i = 0; i < model->n_members * model->n_elements; i++) {
        const nnp_network* net = &ani->networks[i];
        put_u32(w, (uint32_t)net->n_layers);
        for (int32_t l = 0; l < net->n_layers; l++) {
            const nnp_layer* layer = &net->layers[l];
            put_u32(w, (uint32_t)layer->n_in);
            put_u32(w, (uint32_t)layer->n_out);
            put_u32(w, (uint32_t)layer->activation);
            put_f32s(w, layer->weights, (size_t)layer->n_in * (size_t)layer->n_out);
            put_f32s(w, layer->biases, (size_t)layer->n_out);
        }
    }
}

/* ANI's payload, after the name; allocates the networks of model. */
static nnp_status ani_read_payload(reader* r, nnp_model* model) {
    nnp_aev_params p;
    memset(&p, 0, sizeof p);
    p.Rcr = get_f64(r);
    p.Rca = get_f64(r);
    nnp_status st;
    if ((st = get_list(r, "EtaR", p.EtaR, &p.nEtaR)) != NNP_OK ||
        (st = get_list(r, "ShfR", p.ShfR, &p.nShfR)) != NNP_OK ||
        (st = get_list(r, "EtaA", p.EtaA, &p.nEtaA)) != NNP_OK ||
        (st = get_list(r, "Zeta", p.Zeta, &p.nZeta)) != NNP_OK ||
        (st = get_list(r, "ShfA", p.ShfA, &p.nShfA)) != NNP_OK ||
        (st = get_list(r, "ShfZ", p.ShfZ, &p.nShfZ)) != NNP_OK)
        return st;
    uint32_t n_elements = get_u32(r);
    if (n_elements < 1 || n_elements > NNP_MAX_ELEMENTS)
        return nnp_fail(NNP_ERR_FORMAT, "model file: %u elements", n_elements);
    int32_t z[NNP_MAX_ELEMENTS];
    double sae[NNP_MAX_ELEMENTS];
    for (uint32_t e = 0; e < n_elements; e++) {
        uint32_t an = get_u32(r);
        z[e] = an > 1000 ? -1 : (int32_t)an;
        sae[e] = get_f64(r);
    }
    uint32_t n_members = get_u32(r);
    if (r->short_read) return nnp_fail(NNP_ERR_FORMAT, "model file is truncated");
    if (n_members < 1 || n_members > NNP_MAX_MEMBERS)
        return nnp_fail(NNP_ERR_FORMAT, "model file: %u members", n_members);
    nnp_ani* ani = calloc(1, sizeof *ani);
    if (ani == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    model->family_data = ani; /* freed with the model from here on */
    ani->networks = calloc((size_t)n_members * n_elements, sizeof *ani->networks);
    if (ani->networks == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    model->n_members = (int32_t)n_members;
    model->n_elements = (int32_t)n_elements;
    ani->aev = p;
    memcpy(ani->atomic_numbers, z, n_elements * sizeof z[0]);
    memcpy(ani->self_energies, sae, n_elements * sizeof sae[0]);
    st = nnp_ani_finish(model);
    for (uint32_t i = 0; st == NNP_OK && i < n_members * n_elements; i++) {
        nnp_network* net = &ani->networks[i];
        uint32_t n_layers = get_u32(r);
        if (n_layers < 1 || n_layers > NNP_MAX_LAYERS) {
            st = nnp_fail(NNP_ERR_FORMAT, "model file: network %u has %u layers", i, n_layers);
            break;
        }
        for (uint32_t l = 0; st == NNP_OK && l < n_layers; l++) {
            nnp_layer* layer = &net->layers[l];
            uint32_t n_in = get_u32(r), n_out = get_u32(r), act = get_u32(r);
            if (n_in < 1 || n_in > NNP_MAX_WIDTH || n_out < 1 || n_out > NNP_MAX_WIDTH || act > 100) {
                st = nnp_fail(NNP_ERR_FORMAT, "model file: network %u layer %u has bad sizes", i, l + 1);
                break;
            }
            layer->n_in = (int32_t)n_in;
            layer->n_out = (int32_t)n_out;
            layer->activation = (int32_t)act;
            net->n_layers = (int32_t)l + 1; /* so that the model frees what was read */
            if ((st = get_floats(r, (size_t)n_in * n_out, &layer->weights)) == NNP_OK)
                st = get_floats(r, n_out, &layer->biases);
        }
        if (st == NNP_OK) {
            char what[64];
            snprintf(what, sizeof what, "model file: network %u", i);
            st = nnp_ani_network_check(model, net, what);
        }
    }
    if (st == NNP_OK && r->short_read) st = nnp_fail(NNP_ERR_FORMAT, "model file is truncated");
    return st;
}

/* ------------------------------------------------------------------ the family */

static double ani_cutoff(const nnp_model* model) { return nnp_ani_of(model)->aev.Rcr; }

static nnp_status ani_check_charge(const nnp_model* model, int32_t batch, int32_t charge) {
    if (charge == 0) return NNP_OK;
    return nnp_fail(NNP_ERR_UNSUPPORTED, "batch %d: total charge %d, but ANI model '%s' describes neutral molecules "
                    "only (a TensorNet model such as AceFF takes charges)", batch, charge, model->name);
}

const nnp_family nnp_family_ani = {
    .id = NNP_FAMILY_ANI,
    .name = "ani",
    .read_payload = ani_read_payload,
    .write_payload = ani_write_payload,
    .free_data = ani_free_data,
    .cutoff = ani_cutoff,
    .element_index = ani_element_index,
    .check_charge = ani_check_charge,
    .evaluate_cpu = nnp_ani_evaluate_cpu,
    .element = ani_element,
#ifdef NNP_WITH_CUDA
    .evaluate_cuda = nnp_ani_evaluate_cuda,
    .cuda_check = nnp_ani_cuda_check,
    .cuda_free = nnp_ani_cuda_free,
#endif
};

