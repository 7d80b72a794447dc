/* The model object: allocation, validation and queries. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

nnp_model* nnp_model_alloc(int32_t n_members, int32_t n_elements) {
    nnp_model* model = calloc(1, sizeof *model);
    if (model == NULL) return NULL;
    model->family = &nnp_family_ani;
    model->energy_to_kjmol = NNP_HARTREE_TO_KJMOL;
    model->length_to_angstrom = 1.0;
    model->n_members = n_members;
    model->n_elements = n_elements;
    model->networks = calloc((size_t)n_members * (size_t)n_elements, sizeof *model->networks);
    if (model->networks == NULL) {
        free(model);
        return NULL;
    }
    return model;
}

void nnp_model_free(nnp_model* model) {
    if (model == NULL) return;
    if (model->family != NULL && model->family->free_data != NULL) model->family->free_data(model);
    if (model->networks != NULL) {
        for (int32_t i = 0; i < model->n_members * model->n_elements; i++)
            for (int32_t l = 0; l < model->networks[i].n_layers; l++) {
                free(model->networks[i].layers[l].weights);
                free(model->networks[i].layers[l].biases);
            }
        free(model->networks);
    }
    free(model);
}

static int all_finite(const double* v, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return 0;
    return 1;
}

nnp_status nnp_model_finish(nnp_model* model) {
    nnp_aev_params* p = &model->aev;
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
        if (nnp_element_symbol(model->atomic_numbers[i]) == NULL)
            return nnp_fail(NNP_ERR_FORMAT, "model element %d has unknown atomic number %d", i,
                            model->atomic_numbers[i]);
        for (int32_t j = 0; j < i; j++)
            if (model->atomic_numbers[i] == model->atomic_numbers[j])
                return nnp_fail(NNP_ERR_FORMAT, "model lists element %s twice",
                                nnp_element_symbol(model->atomic_numbers[i]));
        if (!isfinite(model->self_energies[i]))
            return nnp_fail(NNP_ERR_FORMAT, "self energy of %s is not finite",
                            nnp_element_symbol(model->atomic_numbers[i]));
    }
    int32_t ne = model->n_elements;
    model->radial_sub = p->nEtaR * p->nShfR;
    model->angular_sub = p->nEtaA * p->nZeta * p->nShfA * p->nShfZ;
    model->radial_length = ne * model->radial_sub;
    int64_t aev = (int64_t)model->radial_length + (int64_t)(ne * (ne + 1) / 2) * model->angular_sub;
    if (aev > NNP_MAX_WIDTH)
        return nnp_fail(NNP_ERR_FORMAT, "AEV length %lld exceeds %d", (long long)aev, NNP_MAX_WIDTH);
    model->aev_length = (int32_t)aev;
    for (int32_t a = 0; a < ne; a++)
        for (int32_t b = a; b < ne; b++) /* row-major upper triangle, as TorchANI's triu_index */
            model->pair_index[a][b] = model->pair_index[b][a] = a * ne - a * (a - 1) / 2 + (b - a);
    return NNP_OK;
}

nnp_status nnp_network_check(const nnp_model* model, const nnp_network* net, const char* what) {
    if (net->n_layers < 1 || net->n_layers > NNP_MAX_LAYERS)
        return nnp_fail(NNP_ERR_FORMAT, "%s: %d layers (need 1..%d)", what, net->n_layers, NNP_MAX_LAYERS);
    int32_t expect = model->aev_length;
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

int32_t nnp_model_element_index(const nnp_model* model, int32_t atomic_number) {
    for (int32_t i = 0; i < model->n_elements; i++)
        if (model->atomic_numbers[i] == atomic_number) return i;
    return -1;
}

const char* nnp_model_name(const nnp_model* model) { return model ? model->name : ""; }
int32_t nnp_model_num_members(const nnp_model* model) { return model ? model->n_members : 0; }
int32_t nnp_model_num_elements(const nnp_model* model) { return model ? model->n_elements : 0; }
double nnp_model_cutoff(const nnp_model* model) {
    return model ? model->family->cutoff(model) * model->length_to_angstrom : 0.0;
}
int32_t nnp_model_aev_length(const nnp_model* model) {
    return model && model->family == &nnp_family_ani ? model->aev_length : 0;
}
nnp_family_id nnp_model_family(const nnp_model* model) { return model ? model->family->id : (nnp_family_id)0; }
const char* nnp_model_family_name(const nnp_model* model) { return model ? model->family->name : ""; }

nnp_status nnp_model_units(const nnp_model* model, double* energy_kjmol, double* length_angstrom) {
    if (model == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_model_units: model is NULL");
    if (energy_kjmol != NULL) *energy_kjmol = model->energy_to_kjmol;
    if (length_angstrom != NULL) *length_angstrom = model->length_to_angstrom;
    return NNP_OK;
}

int32_t nnp_model_element(const nnp_model* model, int32_t index) {
    if (model == NULL || index < 0 || index >= model->n_elements) return -1;
    if (model->family != &nnp_family_ani) return index + 1; /* elements 1 .. n_elements */
    return model->atomic_numbers[index];
}

nnp_status nnp_model_self_energy(const nnp_model* model, int32_t atomic_number, double* hartree) {
    if (model == NULL || hartree == NULL)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_model_self_energy: NULL argument");
    if (model->family != &nnp_family_ani)
        return nnp_fail(NNP_ERR_UNSUPPORTED, "model '%s' is a %s model: self energies are ANI's", model->name,
                        model->family->name);
    int32_t e = nnp_model_element_index(model, atomic_number);
    if (e < 0)
        return nnp_fail(NNP_ERR_ELEMENT, "model '%s' has no element with atomic number %d",
                        model->name, atomic_number);
    *hartree = model->self_energies[e];
    return NNP_OK;
}
