/*
 * libFuzzer target for libnnp's model-file parsers. The first byte picks the parser, the rest is
 * its input:
 *   0  the own format (nnp_model_load_buffer; built with FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION,
 *      so the CRC-32 check does not hide the parser behind it)
 *   1  a NeuroChem .nnf network file (header, bzip2 stream, layer text)
 *   2  a NeuroChem constants (.params) file, followed by model validation
 * A successfully loaded own-format model is also saved and evaluated once, so that whatever the
 * parser accepts is safe to use.
 */
#include "../models/ani/ani.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const uint8_t* in = data + 1;
    size_t n = size - 1;
    switch (data[0] % 3) {
    case 0: {
        nnp_model* model = NULL;
        if (nnp_model_load_buffer(in, n, &model) == NNP_OK) {
            void* buf;
            size_t len;
            if (nnp_model_save_buffer(model, &buf, &len) == NNP_OK) nnp_free(buf);
            nnp_plan* plan;
            if (nnp_plan_create(model, &plan) == NNP_OK) {
                int32_t z[3], b[3] = {0, 0, 1};
                double pos[9] = {0, 0, 0, 0.9, 0.1, 0, -0.2, 1.0, 0.3}, e, be[2], f[9];
                for (int i = 0; i < 3; i++) z[i] = nnp_model_element(model, i % nnp_model_num_elements(model));
                if (nnp_plan_set_atoms(plan, 3, z, b) == NNP_OK) nnp_evaluate_cpu(plan, pos, NULL, &e, be, f);
                nnp_plan_free(plan);
            }
            nnp_model_free(model);
        }
        break;
    }
    case 1: {
        nnp_nnf nnf;
        nnp_parse_nnf(in, n, &nnf);
        break;
    }
    case 2: {
        nnp_model* model = nnp_ani_model_alloc(1, NNP_MAX_ELEMENTS);
        if (model == NULL) return 0;
        model->n_elements = 0;
        char* text = malloc(n + 1);
        if (text != NULL) {
            memcpy(text, in, n);
            text[n] = '\0';
            if (nnp_parse_constants(text, n, model) == NNP_OK) nnp_ani_finish(model);
            free(text);
        }
        model->n_elements = 0; /* no networks were loaded */
        nnp_model_free(model);
        break;
    }
    }
    return 0;
}
