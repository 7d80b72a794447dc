/* The model object: what every family's model answers (the family's own queries are in its folder). */
#include "internal.h"

#include <stdlib.h>

void nnp_model_free(nnp_model* model) {
    if (model == NULL) return;
    if (model->family != NULL && model->family->free_data != NULL) model->family->free_data(model);
    free(model);
}

const char* nnp_model_name(const nnp_model* model) { return model ? model->name : ""; }
int32_t nnp_model_num_members(const nnp_model* model) { return model ? model->n_members : 0; }
int32_t nnp_model_num_elements(const nnp_model* model) { return model ? model->n_elements : 0; }
double nnp_model_cutoff(const nnp_model* model) {
    return model ? model->family->cutoff(model) * model->length_to_angstrom : 0.0;
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
    return model->family->element(model, index);
}
