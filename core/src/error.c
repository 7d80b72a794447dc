/* Status codes, the thread-local last-error message, version, memory and element helpers. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>

#define NNP_STR2(x) #x
#define NNP_STR(x) NNP_STR2(x)

static _Thread_local char last_error[4096];

nnp_status nnp_fail(nnp_status status, const char* fmt, ...) {
    /* Format into a scratch buffer first: callers may pass nnp_last_error() as an argument. */
    char message[sizeof last_error];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    memcpy(last_error, message, sizeof message);
    return status;
}

void nnp_clear_error(void) { last_error[0] = '\0'; }

const char* nnp_last_error(void) { return last_error; }

const char* nnp_version(void) {
    return NNP_STR(NNP_VERSION_MAJOR) "." NNP_STR(NNP_VERSION_MINOR) "." NNP_STR(NNP_VERSION_PATCH);
}

const char* nnp_status_name(nnp_status status) {
    switch (status) {
    case NNP_OK: return "NNP_OK";
    case NNP_ERR_INVALID_ARGUMENT: return "NNP_ERR_INVALID_ARGUMENT";
    case NNP_ERR_IO: return "NNP_ERR_IO";
    case NNP_ERR_FORMAT: return "NNP_ERR_FORMAT";
    case NNP_ERR_ELEMENT: return "NNP_ERR_ELEMENT";
    case NNP_ERR_BATCH: return "NNP_ERR_BATCH";
    case NNP_ERR_NONFINITE: return "NNP_ERR_NONFINITE";
    case NNP_ERR_BOX: return "NNP_ERR_BOX";
    case NNP_ERR_MEMORY: return "NNP_ERR_MEMORY";
    case NNP_ERR_STATE: return "NNP_ERR_STATE";
    case NNP_ERR_CUDA: return "NNP_ERR_CUDA";
    case NNP_ERR_CAPTURE: return "NNP_ERR_CAPTURE";
    case NNP_ERR_UNSUPPORTED: return "NNP_ERR_UNSUPPORTED";
    }
    return "NNP_ERR_UNKNOWN";
}

void nnp_free(void* ptr) { free(ptr); }

static const char* const element_symbols[] = {
    NULL, "H",  "He", "Li", "Be", "B",  "C",  "N",  "O",  "F",  "Ne", "Na", "Mg", "Al", "Si",
    "P",  "S",  "Cl", "Ar", "K",  "Ca", "Sc", "Ti", "V",  "Cr", "Mn", "Fe", "Co", "Ni", "Cu",
    "Zn", "Ga", "Ge", "As", "Se", "Br", "Kr", "Rb", "Sr", "Y",  "Zr", "Nb", "Mo", "Tc", "Ru",
    "Rh", "Pd", "Ag", "Cd", "In", "Sn", "Sb", "Te", "I",  "Xe"};
#define NNP_NUM_SYMBOLS ((int32_t)(sizeof element_symbols / sizeof element_symbols[0]))

int32_t nnp_element_from_symbol(const char* symbol) {
    if (symbol == NULL) return -1;
    for (int32_t z = 1; z < NNP_NUM_SYMBOLS; z++)
        if (strcmp(symbol, element_symbols[z]) == 0) return z;
    return -1;
}

const char* nnp_element_symbol(int32_t atomic_number) {
    if (atomic_number < 1 || atomic_number >= NNP_NUM_SYMBOLS) return NULL;
    return element_symbols[atomic_number];
}

nnp_status nnp_read_rest(FILE* f, const char* path, size_t max_size, const unsigned char* head, size_t head_len,
                         unsigned char** data, size_t* size) {
    size_t cap = head_len > 4096 ? head_len : 4096, len = head_len;
    if (cap > max_size && head_len <= max_size) cap = max_size;
    unsigned char* buf = malloc(cap + 1);
    if (buf == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory reading '%s'", path);
    if (head_len) memcpy(buf, head, head_len);
    for (;;) {
        if (len == cap) {
            if (cap >= max_size) {
                /* Full: over the limit only if there is more to read. */
                int c = fgetc(f);
                if (c == EOF) break;
                free(buf);
                return nnp_fail(NNP_ERR_FORMAT, "'%s' is larger than %zu bytes", path, max_size);
            }
            cap = cap * 2 > max_size ? max_size : cap * 2;
            unsigned char* grown = realloc(buf, cap + 1);
            if (grown == NULL) {
                free(buf);
                return nnp_fail(NNP_ERR_MEMORY, "out of memory reading '%s'", path);
            }
            buf = grown;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        return nnp_fail(NNP_ERR_IO, "error reading '%s'", path);
    }
    buf[len] = '\0';
    *data = buf;
    *size = len;
    return NNP_OK;
}

long long nnp_regular_file_size(FILE* f) {
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) return -1;
    return (long long)sb.st_size;
}

nnp_status nnp_read_file(const char* path, size_t max_size, unsigned char** data, size_t* size) {
    FILE* f = fopen(path, "rb");
    if (f == NULL) return nnp_fail(NNP_ERR_IO, "cannot open '%s'", path);
    long long bytes = nnp_regular_file_size(f);
    if (bytes > (long long)max_size) { /* a regular file: refused from its size, before any read */
        fclose(f);
        return nnp_fail(NNP_ERR_FORMAT, "'%s' is larger than %zu bytes (%lld)", path, max_size, bytes);
    }
    nnp_status st = nnp_read_rest(f, path, max_size, NULL, 0, data, size);
    fclose(f);
    return st;
}
