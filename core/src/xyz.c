/* XYZ files: plain, or extended XYZ with Lattice="ax ay az bx by bz cx cy cz" (Å). */
#include "internal.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NNP_MAX_XYZ (256u << 20)

static char* next_line(char** cursor) {
    char* s = *cursor;
    if (s == NULL || *s == '\0') return NULL;
    char* e = strchr(s, '\n');
    if (e) {
        *e = '\0';
        *cursor = e + 1;
    } else {
        *cursor = s + strlen(s);
    }
    size_t len = strlen(s);
    if (len > 0 && s[len - 1] == '\r') s[len - 1] = '\0';
    return s;
}

static int parse_lattice(const char* comment, double* box) {
    const char* p = strstr(comment, "Lattice=\"");
    if (p == NULL) return 0;
    p += 9;
    char* end;
    for (int k = 0; k < 9; k++) {
        box[k] = strtod(p, &end);
        if (end == p) return -1;
        p = end;
    }
    while (isspace((unsigned char)*p)) p++;
    return *p == '"' ? 1 : -1;
}

nnp_status nnp_xyz_read(const char* path, int32_t* n_atoms, int32_t** atomic_numbers, double** positions,
                        double* box, int* has_box) {
    if (path == NULL || n_atoms == NULL || atomic_numbers == NULL || positions == NULL)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_xyz_read: NULL argument");
    unsigned char* data;
    size_t size;
    nnp_status st = nnp_read_file(path, NNP_MAX_XYZ, &data, &size);
    if (st != NNP_OK) return st;
    if (memchr(data, '\0', size) != NULL) {
        free(data);
        return nnp_fail(NNP_ERR_FORMAT, "%s: not a text file", path);
    }
    char* cursor = (char*)data;
    char* line = next_line(&cursor);
    char* end;
    long n = line ? strtol(line, &end, 10) : -1;
    if (line == NULL || end == line || n < 1 || n > 100000000) {
        free(data);
        return nnp_fail(NNP_ERR_FORMAT, "%s: first line must be the atom count", path);
    }
    while (isspace((unsigned char)*end)) end++;
    char* comment = next_line(&cursor);
    if (*end != '\0' || comment == NULL) {
        free(data);
        return nnp_fail(NNP_ERR_FORMAT, "%s: first line must be the atom count, then a comment line", path);
    }
    double lattice[9] = {0};
    int lat = parse_lattice(comment, lattice);
    if (lat < 0) {
        free(data);
        return nnp_fail(NNP_ERR_FORMAT, "%s: Lattice=\"...\" must hold 9 numbers", path);
    }
    int32_t* z = malloc((size_t)n * sizeof *z);
    double* pos = malloc((size_t)n * 3 * sizeof *pos);
    if (z == NULL || pos == NULL) {
        free(z), free(pos), free(data);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    }
    for (long i = 0; i < n; i++) {
        line = next_line(&cursor);
        char sym[8];
        int used = 0;
        if (line == NULL || sscanf(line, " %7s %lf %lf %lf%n", sym, &pos[3 * i], &pos[3 * i + 1],
                                   &pos[3 * i + 2], &used) != 4) {
            free(z), free(pos), free(data);
            return nnp_fail(NNP_ERR_FORMAT, "%s: atom line %ld is missing or not 'symbol x y z'", path, i + 1);
        }
        z[i] = nnp_element_from_symbol(sym);
        if (z[i] < 0) {
            free(z), free(pos), free(data);
            return nnp_fail(NNP_ERR_ELEMENT, "%s: atom %ld has unknown element '%s'", path, i + 1, sym);
        }
        for (int k = 0; k < 3; k++)
            if (!isfinite(pos[3 * i + k])) {
                free(z), free(pos), free(data);
                return nnp_fail(NNP_ERR_NONFINITE, "%s: atom %ld has a non-finite coordinate", path, i + 1);
            }
    }
    free(data);
    *n_atoms = (int32_t)n;
    *atomic_numbers = z;
    *positions = pos;
    if (box != NULL) memcpy(box, lattice, sizeof lattice);
    if (has_box != NULL) *has_box = lat == 1;
    return NNP_OK;
}
