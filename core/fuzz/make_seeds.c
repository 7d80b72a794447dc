/* Writes a seed corpus for fuzz_model into the directory given: a tiny model in the own format,
   real NeuroChem files from the model zoo directory given second, and any further files given (own-
   format models of other families, e.g. the converted TensorNet test checkpoints). */
#include "../models/ani/ani.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void write_seed(const char* dir, const char* name, unsigned char tag, const void* data, size_t size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE* f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    fputc(tag, f);
    fwrite(data, 1, size, f);
    fclose(f);
}

static void copy_seed(const char* dir, const char* name, unsigned char tag, const char* src) {
    unsigned char* data;
    size_t size;
    if (nnp_read_file(src, 1u << 20, &data, &size) != NNP_OK) {
        fprintf(stderr, "make_seeds: %s\n", nnp_last_error());
        exit(1);
    }
    write_seed(dir, name, tag, data, size);
    free(data);
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: make_seeds OUTDIR MODEL_ZOO_DIR [MODEL.nnpm...]\n");
        return 2;
    }
    /* A two-element, two-member model with tiny networks. */
    nnp_model* m = nnp_ani_model_alloc(2, 2);
    strcpy(m->name, "tiny");
    nnp_ani_of(m)->aev = (nnp_aev_params){.Rcr = 5.0, .Rca = 3.5, .nEtaR = 1, .nShfR = 2, .nEtaA = 1, .nZeta = 1,
                              .nShfA = 1, .nShfZ = 2, .EtaR = {16}, .ShfR = {0.9, 1.5}, .EtaA = {8},
                              .Zeta = {32}, .ShfA = {0.9}, .ShfZ = {0.2, 0.6}};
    nnp_ani_of(m)->atomic_numbers[0] = 1, nnp_ani_of(m)->atomic_numbers[1] = 8;
    nnp_ani_of(m)->self_energies[0] = -0.5, nnp_ani_of(m)->self_energies[1] = -75.0;
    if (nnp_ani_finish(m) != NNP_OK) return fprintf(stderr, "%s\n", nnp_last_error()), 1;
    for (int i = 0; i < 4; i++) {
        nnp_network* net = &nnp_ani_of(m)->networks[i];
        net->n_layers = 2;
        int32_t sizes[3] = {nnp_ani_of(m)->aev_length, 3, 1};
        for (int l = 0; l < 2; l++) {
            nnp_layer* ly = &net->layers[l];
            ly->n_in = sizes[l], ly->n_out = sizes[l + 1], ly->activation = l == 0 ? NNP_ACT_CELU : NNP_ACT_LINEAR;
            ly->weights = malloc(sizeof(float) * (size_t)(ly->n_in * ly->n_out));
            ly->biases = malloc(sizeof(float) * (size_t)ly->n_out);
            for (int k = 0; k < ly->n_in * ly->n_out; k++) ly->weights[k] = 0.1f * (float)(k % 7) - 0.3f;
            for (int k = 0; k < ly->n_out; k++) ly->biases[k] = 0.01f * (float)k;
        }
    }
    void* buf;
    size_t size;
    if (nnp_model_save_buffer(m, &buf, &size) != NNP_OK) return fprintf(stderr, "%s\n", nnp_last_error()), 1;
    write_seed(argv[1], "tiny.nnpm", 0, buf, size);
    nnp_free(buf);
    nnp_model_free(m);
    char src[4096];
    const char* nets[] = {"ani-1x_8x/train0/networks/ANN-H.nnf", "ani-2x_8x/train3/networks/ANN-Cl.nnf"};
    for (int k = 0; k < 2; k++) {
        snprintf(src, sizeof src, "%s/%s", argv[2], nets[k]);
        copy_seed(argv[1], k ? "cl.nnf" : "h.nnf", 1, src);
    }
    snprintf(src, sizeof src, "%s/ani-1x_8x/rHCNO-5.2R_16-3.5A_a4-8.params", argv[2]);
    copy_seed(argv[1], "ani1x.params", 2, src);
    snprintf(src, sizeof src, "%s/ani-2x_8x/rHCNOSFCl-5.1R_16-3.5A_a8-4.params", argv[2]);
    copy_seed(argv[1], "ani2x.params", 2, src);
    for (int a = 3; a < argc; a++) {
        const char* base = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
        copy_seed(argv[1], base, 0, argv[a]);
    }
    printf("make_seeds: wrote %d seeds to %s\n", 5 + argc - 3, argv[1]);
    return 0;
}
