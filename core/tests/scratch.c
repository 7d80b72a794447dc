#include "nnp.h"
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
int main(void) {
    nnp_model* m;
    if (nnp_model_load("/work/shared/models/ani-model-zoo/ani-2x_8x.info", &m)) { printf("%s\n", nnp_last_error()); return 1; }
    int32_t n, *z; double* pos;
    nnp_xyz_read("/work/shared/molecules/druglike/drugbank-0030.xyz", &n, &z, &pos, NULL, NULL);
    int32_t* b = calloc(n, 4);
    nnp_plan* p; nnp_plan_create(m, &p); nnp_plan_set_atoms(p, n, z, b);
    double e, *f = malloc(24*n);
    if (nnp_evaluate_cpu(p, pos, NULL, &e, NULL, f)) printf("%s\n", nnp_last_error());
    printf("E %.10f\n", e);
    double maxerr = 0, maxf = 0;
    for (int i = 0; i < 3*n; i++) {
        double h = 1e-4, ep, em, x = pos[i];
        pos[i] = x + h; nnp_evaluate_cpu(p, pos, NULL, &ep, NULL, NULL);
        pos[i] = x - h; nnp_evaluate_cpu(p, pos, NULL, &em, NULL, NULL);
        pos[i] = x;
        double fd = -(ep - em) / (2*h);
        if (fabs(fd - f[i]) > maxerr) maxerr = fabs(fd - f[i]);
        if (fabs(f[i]) > maxf) maxf = fabs(f[i]);
    }
    printf("max |F| %.6g max err %.3g\n", maxf, maxerr);
    return 0;
}
