/*
 * Loader of the NeuroChem layout used by the ANI model zoo:
 *   <name>.info          4 lines: constants file, self-energy file, network directory prefix,
 *                        member count (paths relative to the .info file's directory)
 *   <constants>.params   "Key = value" lines: Rcr, Rca, EtaR, ShfR, EtaA, Zeta, ShfA, ShfZ, Atyp
 *   sae_linfit.dat       "El,index=energy" lines (Hartree)
 *   <prefix><k>/networks/ANN-<El>.nnf   text length, '=', one byte, a bzip2 stream describing the
 *                        layers; each layer names float32 .wparam (out × in) and .bparam files.
 * Every size is checked against the description; nothing is trusted.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "ani.h"

#include <bzlib.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NNP_MAX_TEXT (1u << 20)       /* constants, sae, info, decompressed nnf */
#define NNP_MAX_PARAM_FILE (1u << 30) /* one .wparam */

/* ------------------------------------------------------------------ text helpers */

typedef struct line_reader {
    const char* p;
    const char* end;
} line_reader;

/* Next line, trimmed of surrounding whitespace; returns 0 at the end. */
static int next_line(line_reader* r, const char** start, size_t* len) {
    if (r->p >= r->end) return 0;
    const char* s = r->p;
    const char* e = memchr(s, '\n', (size_t)(r->end - s));
    if (e == NULL) e = r->end;
    r->p = e < r->end ? e + 1 : r->end;
    while (s < e && isspace((unsigned char)*s)) s++;
    while (e > s && isspace((unsigned char)e[-1])) e--;
    *start = s;
    *len = (size_t)(e - s);
    return 1;
}

/* Copies [s, s+len) trimmed into out (NUL-terminated); fails if it does not fit. */
static int copy_trimmed(const char* s, size_t len, char* out, size_t cap) {
    while (len > 0 && isspace((unsigned char)*s)) s++, len--;
    while (len > 0 && isspace((unsigned char)s[len - 1])) len--;
    if (len + 1 > cap) return 0;
    memcpy(out, s, len);
    out[len] = '\0';
    return 1;
}

static int parse_double(const char* s, double* out) {
    char* end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE) return 0;
    *out = v;
    return 1;
}

static int parse_int64(const char* s, int64_t* out) {
    char* end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE) return 0;
    *out = v;
    return 1;
}

static int parse_int32(const char* s, int32_t* out) {
    int64_t v;
    if (!parse_int64(s, &v) || v < INT32_MIN || v > INT32_MAX) return 0;
    *out = (int32_t)v;
    return 1;
}

static int has_nul(const char* text, size_t size) { return memchr(text, '\0', size) != NULL; }

/* ------------------------------------------------------------------ constants */

/* x rounded to the nearest float32. The volatile store keeps the rounding: GCC 12 at -O2 drops
   `x = (float)x` on a struct member (seen with this project's code), which silently changed results. */
static double round_to_float(double x) {
    volatile float f = (float)x;
    return f;
}

/* Parses "[a,b,c]" into doubles. */
static nnp_status parse_list(const char* key, const char* value, double* out, int32_t* n) {
    size_t len = strlen(value);
    if (len < 2 || value[0] != '[' || value[len - 1] != ']')
        return nnp_fail(NNP_ERR_FORMAT, "constants: %s must be a [list]", key);
    *n = 0;
    const char* s = value + 1;
    const char* end = value + len - 1;
    while (s < end) {
        const char* comma = memchr(s, ',', (size_t)(end - s));
        const char* stop = comma ? comma : end;
        char item[64];
        double v;
        if (!copy_trimmed(s, (size_t)(stop - s), item, sizeof item) || !parse_double(item, &v))
            return nnp_fail(NNP_ERR_FORMAT, "constants: %s has a bad number", key);
        if (*n >= NNP_MAX_TERMS)
            return nnp_fail(NNP_ERR_FORMAT, "constants: %s has more than %d entries", key, NNP_MAX_TERMS);
        out[(*n)++] = v;
        s = comma ? comma + 1 : end;
    }
    if (*n == 0) return nnp_fail(NNP_ERR_FORMAT, "constants: %s is empty", key);
    return NNP_OK;
}

static nnp_status parse_elements(const char* value, nnp_model* model) {
    size_t len = strlen(value);
    if (len < 2 || value[0] != '[' || value[len - 1] != ']')
        return nnp_fail(NNP_ERR_FORMAT, "constants: Atyp must be a [list] of element symbols");
    int32_t n = 0;
    const char* s = value + 1;
    const char* end = value + len - 1;
    while (s < end) {
        const char* comma = memchr(s, ',', (size_t)(end - s));
        const char* stop = comma ? comma : end;
        char sym[8];
        if (!copy_trimmed(s, (size_t)(stop - s), sym, sizeof sym))
            return nnp_fail(NNP_ERR_FORMAT, "constants: Atyp has a bad entry");
        int32_t z = nnp_element_from_symbol(sym);
        if (z < 0) return nnp_fail(NNP_ERR_FORMAT, "constants: Atyp has unknown element '%s'", sym);
        if (n >= NNP_MAX_ELEMENTS)
            return nnp_fail(NNP_ERR_FORMAT, "constants: Atyp has more than %d elements", NNP_MAX_ELEMENTS);
        nnp_ani_of(model)->atomic_numbers[n++] = z;
        s = comma ? comma + 1 : end;
    }
    model->n_elements = n;
    return NNP_OK;
}

nnp_status nnp_parse_constants(const char* text, size_t size, nnp_model* model) {
    if (has_nul(text, size)) return nnp_fail(NNP_ERR_FORMAT, "constants: file contains a NUL byte");
    nnp_aev_params* p = &nnp_ani_of(model)->aev;
    enum { K_RCR, K_RCA, K_ETAR, K_SHFR, K_ETAA, K_ZETA, K_SHFA, K_SHFZ, K_ATYP, K_COUNT };
    static const char* const names[K_COUNT] = {"Rcr", "Rca", "EtaR", "ShfR", "EtaA",
                                               "Zeta", "ShfA", "ShfZ", "Atyp"};
    int seen[K_COUNT] = {0};
    line_reader r = {text, text + size};
    const char* s;
    size_t len;
    while (next_line(&r, &s, &len)) {
        if (len == 0) continue;
        const char* eq = memchr(s, '=', len);
        if (eq == NULL) return nnp_fail(NNP_ERR_FORMAT, "constants: line without '='");
        char key[32], value[4096];
        if (!copy_trimmed(s, (size_t)(eq - s), key, sizeof key) ||
            !copy_trimmed(eq + 1, len - (size_t)(eq + 1 - s), value, sizeof value))
            return nnp_fail(NNP_ERR_FORMAT, "constants: line too long");
        int k = -1;
        for (int i = 0; i < K_COUNT; i++)
            if (strcmp(key, names[i]) == 0) k = i;
        if (k < 0) continue; /* training settings (DESC, TM, ...) do not matter here */
        if (seen[k]) return nnp_fail(NNP_ERR_FORMAT, "constants: %s given twice", key);
        seen[k] = 1;
        nnp_status st = NNP_OK;
        switch (k) {
        case K_RCR:
            if (!parse_double(value, &p->Rcr)) st = nnp_fail(NNP_ERR_FORMAT, "constants: bad Rcr");
            break;
        case K_RCA:
            if (!parse_double(value, &p->Rca)) st = nnp_fail(NNP_ERR_FORMAT, "constants: bad Rca");
            break;
        case K_ETAR: st = parse_list(key, value, p->EtaR, &p->nEtaR); break;
        case K_SHFR: st = parse_list(key, value, p->ShfR, &p->nShfR); break;
        case K_ETAA: st = parse_list(key, value, p->EtaA, &p->nEtaA); break;
        case K_ZETA: st = parse_list(key, value, p->Zeta, &p->nZeta); break;
        case K_SHFA: st = parse_list(key, value, p->ShfA, &p->nShfA); break;
        case K_SHFZ: st = parse_list(key, value, p->ShfZ, &p->nShfZ); break;
        case K_ATYP: st = parse_elements(value, model); break;
        }
        if (st != NNP_OK) return st;
    }
    for (int i = 0; i < K_COUNT; i++)
        if (!seen[i]) return nnp_fail(NNP_ERR_FORMAT, "constants: %s is missing", names[i]);
    /* TorchANI holds the AEV parameter lists as float32 tensors (the cutoffs stay double): round
       them so that the double-precision evaluation reproduces the published values exactly. */
    double* lists[] = {p->EtaR, p->ShfR, p->EtaA, p->Zeta, p->ShfA, p->ShfZ};
    int32_t counts[] = {p->nEtaR, p->nShfR, p->nEtaA, p->nZeta, p->nShfA, p->nShfZ};
    for (int l = 0; l < 6; l++)
        for (int32_t k = 0; k < counts[l]; k++) lists[l][k] = round_to_float(lists[l][k]);
    return NNP_OK;
}

/* ------------------------------------------------------------------ self energies */

static nnp_status parse_sae(const char* text, size_t size, nnp_model* model) {
    if (has_nul(text, size)) return nnp_fail(NNP_ERR_FORMAT, "self energies: file contains a NUL byte");
    int seen[NNP_MAX_ELEMENTS] = {0};
    line_reader r = {text, text + size};
    const char* s;
    size_t len;
    while (next_line(&r, &s, &len)) {
        if (len == 0) continue;
        char line[256];
        if (!copy_trimmed(s, len, line, sizeof line))
            return nnp_fail(NNP_ERR_FORMAT, "self energies: line too long");
        char* comma = strchr(line, ',');
        char* eq = strchr(line, '=');
        if (comma == NULL || eq == NULL || eq < comma)
            return nnp_fail(NNP_ERR_FORMAT, "self energies: expected 'El,index=energy', got '%s'", line);
        *comma = '\0';
        *eq = '\0';
        int32_t index;
        double energy;
        int32_t z = nnp_element_from_symbol(line);
        if (z < 0 || !parse_int32(comma + 1, &index) || !parse_double(eq + 1, &energy))
            return nnp_fail(NNP_ERR_FORMAT, "self energies: bad line for '%s'", line);
        if (index < 0 || index >= model->n_elements || nnp_ani_of(model)->atomic_numbers[index] != z)
            return nnp_fail(NNP_ERR_FORMAT, "self energies: %s,%d does not match the element list",
                            line, index);
        if (seen[index]) return nnp_fail(NNP_ERR_FORMAT, "self energies: %s given twice", line);
        seen[index] = 1;
        nnp_ani_of(model)->self_energies[index] = energy;
    }
    for (int32_t i = 0; i < model->n_elements; i++)
        if (!seen[i])
            return nnp_fail(NNP_ERR_FORMAT, "self energies: %s is missing",
                            nnp_element_symbol(nnp_ani_of(model)->atomic_numbers[i]));
    return NNP_OK;
}

/* ------------------------------------------------------------------ .nnf */

/* "FILE:name[count]" → name, count. The name may not leave the network directory. */
static int parse_file_ref(const char* value, char* name, size_t cap, int64_t* count) {
    if (strncmp(value, "FILE:", 5) != 0) return 0;
    const char* s = value + 5;
    const char* open = strchr(s, '[');
    size_t vlen = strlen(value);
    if (open == NULL || value[vlen - 1] != ']') return 0;
    size_t nlen = (size_t)(open - s);
    if (nlen == 0 || nlen + 1 > cap) return 0;
    memcpy(name, s, nlen);
    name[nlen] = '\0';
    if (strchr(name, '/') || strchr(name, '\\') || strcmp(name, "..") == 0) return 0;
    char num[32];
    size_t clen = (size_t)(value + vlen - 1 - (open + 1));
    if (clen == 0 || clen + 1 > sizeof num) return 0;
    memcpy(num, open + 1, clen);
    num[clen] = '\0';
    return parse_int64(num, count) && *count > 0;
}

static nnp_status parse_nnf_text(const char* text, size_t size, nnp_nnf* out) {
    memset(out, 0, sizeof *out);
    out->inputsize = -1;
    line_reader r = {text, text + size};
    const char* s;
    size_t len;
    int in_layer = 0, seen_net = 0, done = 0;
    nnp_nnf_layer* layer = NULL;
    int got_nodes = 0, got_act = 0, got_block = 0, got_w = 0, got_b = 0;
    while (next_line(&r, &s, &len)) {
        char line[512];
        if (!copy_trimmed(s, len, line, sizeof line))
            return nnp_fail(NNP_ERR_FORMAT, "network file: line too long");
        if (line[0] == '\0') continue;
        if (done) return nnp_fail(NNP_ERR_FORMAT, "network file: text after the closing '$'");
        if (!seen_net) {
            if (strncmp(line, "inputsize=", 10) == 0) {
                size_t l = strlen(line);
                if (line[l - 1] != ';') return nnp_fail(NNP_ERR_FORMAT, "network file: bad inputsize");
                line[l - 1] = '\0';
                if (!parse_int32(line + 10, &out->inputsize) || out->inputsize < 1)
                    return nnp_fail(NNP_ERR_FORMAT, "network file: bad inputsize");
                continue;
            }
            char sym[8];
            if (strncmp(line, "atom_net ", 9) == 0 && sscanf(line + 9, "%7s $", sym) == 1) {
                memcpy(out->element, sym, sizeof sym);
                seen_net = 1;
                continue;
            }
            return nnp_fail(NNP_ERR_FORMAT, "network file: unexpected line '%.40s' before atom_net", line);
        }
        if (!in_layer) {
            if (strcmp(line, "layer [") == 0) {
                if (out->n_layers >= NNP_MAX_LAYERS)
                    return nnp_fail(NNP_ERR_FORMAT, "network file: more than %d layers", NNP_MAX_LAYERS);
                layer = &out->layers[out->n_layers++];
                in_layer = 1;
                got_nodes = got_act = got_block = got_w = got_b = 0;
                continue;
            }
            if (strcmp(line, "$") == 0) {
                done = 1;
                continue;
            }
            return nnp_fail(NNP_ERR_FORMAT, "network file: unexpected line '%.40s'", line);
        }
        if (strcmp(line, "]") == 0) {
            if (!(got_nodes && got_act && got_block && got_w && got_b))
                return nnp_fail(NNP_ERR_FORMAT, "network file: layer %d lacks nodes, activation, "
                                "blocksize, weights or biases", out->n_layers);
            in_layer = 0;
            continue;
        }
        size_t l = strlen(line);
        char* eq = strchr(line, '=');
        if (eq == NULL || line[l - 1] != ';')
            return nnp_fail(NNP_ERR_FORMAT, "network file: bad layer line '%.40s'", line);
        line[l - 1] = '\0';
        *eq = '\0';
        const char* key = line;
        const char* value = eq + 1;
        int ok = 1;
        if (strcmp(key, "nodes") == 0) ok = parse_int32(value, &layer->nodes), got_nodes = 1;
        else if (strcmp(key, "activation") == 0) ok = parse_int32(value, &layer->activation), got_act = 1;
        else if (strcmp(key, "blocksize") == 0) ok = parse_int32(value, &layer->blocksize), got_block = 1;
        else if (strcmp(key, "weights") == 0)
            ok = parse_file_ref(value, layer->wfile, sizeof layer->wfile, &layer->wcount), got_w = 1;
        else if (strcmp(key, "biases") == 0)
            ok = parse_file_ref(value, layer->bfile, sizeof layer->bfile, &layer->bcount), got_b = 1;
        if (!ok) return nnp_fail(NNP_ERR_FORMAT, "network file: bad value for %s", key);
    }
    if (!seen_net || in_layer || !done || out->n_layers == 0 || out->inputsize < 1)
        return nnp_fail(NNP_ERR_FORMAT, "network file: incomplete description");
    int64_t expect = out->inputsize;
    for (int32_t i = 0; i < out->n_layers; i++) {
        nnp_nnf_layer* ly = &out->layers[i];
        if (ly->nodes < 1 || ly->nodes > NNP_MAX_WIDTH || ly->blocksize != expect ||
            ly->wcount != (int64_t)ly->nodes * ly->blocksize || ly->bcount != ly->nodes)
            return nnp_fail(NNP_ERR_FORMAT, "network file: layer %d sizes are inconsistent (nodes=%d, "
                            "blocksize=%d, weights=%lld, biases=%lld, expected inputs %lld)", i + 1,
                            ly->nodes, ly->blocksize, (long long)ly->wcount, (long long)ly->bcount,
                            (long long)expect);
        expect = ly->nodes;
    }
    return NNP_OK;
}

nnp_status nnp_parse_nnf(const unsigned char* data, size_t size, nnp_nnf* out) {
    size_t i = 0;
    while (i < size && i < 16 && isdigit(data[i])) i++;
    if (i == 0 || i >= size || data[i] != '=' || i + 2 > size)
        return nnp_fail(NNP_ERR_FORMAT, "network file: missing '<length>=' header");
    char num[20];
    memcpy(num, data, i);
    num[i] = '\0';
    int64_t declared;
    if (!parse_int64(num, &declared) || declared < 1 || declared > (int64_t)NNP_MAX_TEXT)
        return nnp_fail(NNP_ERR_FORMAT, "network file: declared length %s is not valid", num);
    /* The header is followed by one separator byte, then the bzip2 stream. */
    const unsigned char* stream = data + i + 2;
    size_t stream_size = size - (i + 2);
    if (stream_size > UINT_MAX) return nnp_fail(NNP_ERR_FORMAT, "network file: too large");
    unsigned int out_len = (unsigned int)declared + 1; /* one spare byte detects overlong streams */
    char* text = malloc(out_len);
    if (text == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    int rc = BZ2_bzBuffToBuffDecompress(text, &out_len, (char*)stream, (unsigned int)stream_size, 0, 0);
    if (rc != BZ_OK) {
        free(text);
        return nnp_fail(NNP_ERR_FORMAT, "network file: bzip2 stream is %s",
                        rc == BZ_OUTBUFF_FULL ? "longer than its declared length"
                        : rc == BZ_UNEXPECTED_EOF ? "truncated" : "corrupt");
    }
    if ((int64_t)out_len != declared) {
        free(text);
        return nnp_fail(NNP_ERR_FORMAT, "network file: text has %u bytes, header says %lld", out_len,
                        (long long)declared);
    }
    /* The text ends with one NUL; no other may appear. */
    size_t tlen = out_len;
    if (tlen > 0 && text[tlen - 1] == '\0') tlen--;
    nnp_status st = has_nul(text, tlen) ? nnp_fail(NNP_ERR_FORMAT, "network file: text contains a NUL byte")
                                        : parse_nnf_text(text, tlen, out);
    free(text);
    return st;
}

/* ------------------------------------------------------------------ files */

/* Whether a name from a model file leaves its folder: an absolute path or a ".." component. */
static int names_outside(const char* b) {
    if (b[0] == '/') return 1;
    for (const char* c = b; *c; c++)
        if (c[0] == '.' && c[1] == '.' && (c == b || c[-1] == '/') && (c[2] == '\0' || c[2] == '/')) return 1;
    return 0;
}

static nnp_status outside_error(const char* b, const char* root) {
    return nnp_fail(NNP_ERR_FORMAT, "the model names '%.200s', outside its folder %s: model files may only "
                    "name files in their own folder", b, root[0] ? root : "./");
}

/* Joins a folder inside the model's folder `root` (the .info file's folder, with its trailing slash,
   or "" for the working folder) and a name from a model file. The name must stay inside the folder:
   no absolute path and no ".." component, and a file that exists must not resolve (through symbolic
   links) to a place outside root: a model file must not make the loader read other files. */
static nnp_status join_path(char* out, size_t cap, const char* root, const char* a, const char* b) {
    if (names_outside(b)) return outside_error(b, root);
    int n = snprintf(out, cap, "%s%s", a, b);
    if (n < 0 || (size_t)n >= cap) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "path too long: %s%s", a, b);
    char* real = realpath(out, NULL);
    if (real == NULL) return NNP_OK; /* absent: the reader says so */
    char* real_root = realpath(root[0] ? root : ".", NULL);
    size_t k = real_root ? strlen(real_root) : 0;
    int inside = real_root != NULL && strncmp(real, real_root, k) == 0 && (real[k] == '/' || k == 1);
    if (!inside) {
        nnp_status st = nnp_fail(NNP_ERR_FORMAT, "%s resolves to %.300s, outside the model's folder %s: model "
                                 "files may only name files in their own folder", out, real, root[0] ? root : "./");
        free(real), free(real_root);
        return st;
    }
    free(real), free(real_root);
    return NNP_OK;
}

static nnp_status read_floats(const char* path, int64_t count, float** out) {
    unsigned char* data;
    size_t size;
    nnp_status st = nnp_read_file(path, NNP_MAX_PARAM_FILE, &data, &size);
    if (st != NNP_OK) return st;
    if ((int64_t)size != count * 4) {
        free(data);
        return nnp_fail(NNP_ERR_FORMAT, "'%s' has %zu bytes, the network description needs %lld "
                        "(%lld float32 values)%s", path, size, (long long)(count * 4), (long long)count,
                        (int64_t)size < count * 4 ? ": truncated" : "");
    }
    float* v = malloc((size_t)count * sizeof(float));
    if (v == NULL) {
        free(data);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    }
    for (int64_t i = 0; i < count; i++) { /* little-endian float32 */
        uint32_t bits = (uint32_t)data[4 * i] | (uint32_t)data[4 * i + 1] << 8 |
                        (uint32_t)data[4 * i + 2] << 16 | (uint32_t)data[4 * i + 3] << 24;
        memcpy(&v[i], &bits, 4);
    }
    free(data);
    *out = v;
    return NNP_OK;
}

static nnp_status load_network(const nnp_model* model, const char* root, const char* dir, int32_t element,
                               nnp_network* net) {
    const char* sym = nnp_element_symbol(nnp_ani_of(model)->atomic_numbers[element]);
    char path[4096];
    char name[32];
    snprintf(name, sizeof name, "ANN-%s.nnf", sym);
    nnp_status st = join_path(path, sizeof path, root, dir, name);
    if (st != NNP_OK) return st;
    unsigned char* data;
    size_t size;
    st = nnp_read_file(path, NNP_MAX_TEXT, &data, &size);
    if (st != NNP_OK) return st;
    nnp_nnf nnf;
    st = nnp_parse_nnf(data, size, &nnf);
    free(data);
    if (st != NNP_OK) return nnp_fail(st, "%s: %s", path, nnp_last_error());
    if (strcmp(nnf.element, sym) != 0)
        return nnp_fail(NNP_ERR_FORMAT, "%s describes element '%s', expected '%s'", path, nnf.element, sym);
    if (nnf.inputsize != nnp_ani_of(model)->aev_length)
        return nnp_fail(NNP_ERR_FORMAT, "%s takes %d inputs, the constants give an AEV of %d", path,
                        nnf.inputsize, nnp_ani_of(model)->aev_length);
    net->n_layers = nnf.n_layers;
    for (int32_t l = 0; l < nnf.n_layers; l++) {
        nnp_layer* layer = &net->layers[l];
        layer->n_in = nnf.layers[l].blocksize;
        layer->n_out = nnf.layers[l].nodes;
        layer->activation = nnf.layers[l].activation;
        if ((st = join_path(path, sizeof path, root, dir, nnf.layers[l].wfile)) != NNP_OK ||
            (st = read_floats(path, nnf.layers[l].wcount, &layer->weights)) != NNP_OK ||
            (st = join_path(path, sizeof path, root, dir, nnf.layers[l].bfile)) != NNP_OK ||
            (st = read_floats(path, nnf.layers[l].bcount, &layer->biases)) != NNP_OK)
            return st;
    }
    char what[4200];
    snprintf(what, sizeof what, "%sANN-%s.nnf", dir, sym);
    return nnp_ani_network_check(model, net, what);
}

static nnp_status read_text(const char* path, char** text, size_t* size) {
    return nnp_read_file(path, NNP_MAX_TEXT, (unsigned char**)text, size);
}

nnp_status nnp_model_load_neurochem(const char* info_path, nnp_model** out) {
    if (info_path == NULL || out == NULL)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_model_load_neurochem: NULL argument");
    nnp_clear_error();
    char* info;
    size_t info_size;
    nnp_status st = nnp_read_file(info_path, NNP_MAX_INFO, (unsigned char**)&info, &info_size);
    if (st != NNP_OK) return st;
    st = nnp_model_load_neurochem_text(info_path, info, info_size, out);
    free(info);
    return st;
}

nnp_status nnp_model_load_neurochem_text(const char* info_path, const char* info, size_t info_size, nnp_model** out) {
    nnp_status st;
    /* Directory of the .info file, with a trailing slash. */
    char dir[4096];
    const char* slash = strrchr(info_path, '/');
    size_t dlen = slash ? (size_t)(slash - info_path + 1) : 0;
    if (dlen >= sizeof dir) {
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "path too long: %s", info_path);
    }
    memcpy(dir, info_path, dlen);
    dir[dlen] = '\0';

    char lines[4][1024];
    int n_lines = 0;
    line_reader r = {info, info + info_size};
    const char* s;
    size_t len;
    int bad = has_nul(info, info_size);
    while (!bad && next_line(&r, &s, &len)) {
        if (len == 0) continue;
        if (n_lines == 4 || !copy_trimmed(s, len, lines[n_lines], sizeof lines[0])) bad = 1;
        else n_lines++;
    }
    int32_t n_members = 0;
    if (bad || n_lines != 4 || !parse_int32(lines[3], &n_members))
        return nnp_fail(NNP_ERR_FORMAT, "%s: expected 4 lines (constants file, self-energy file, "
                        "network prefix, member count)", info_path);
    if (n_members < 1 || n_members > NNP_MAX_MEMBERS)
        return nnp_fail(NNP_ERR_FORMAT, "%s: member count %d is not in 1..%d", info_path, n_members,
                        NNP_MAX_MEMBERS);

    nnp_model* model = nnp_ani_model_alloc(n_members, NNP_MAX_ELEMENTS);
    if (model == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    model->n_elements = 0;
    /* Name: the .info file's base name without extension. */
    const char* base = slash ? slash + 1 : info_path;
    snprintf(model->name, sizeof model->name, "%s", base);
    char* dot = strrchr(model->name, '.');
    if (dot && dot != model->name) *dot = '\0';

    char path[4096];
    char* text = NULL;
    size_t size;
    if ((st = join_path(path, sizeof path, dir, dir, lines[0])) == NNP_OK &&
        (st = read_text(path, &text, &size)) == NNP_OK) {
        st = nnp_parse_constants(text, size, model);
        free(text);
        if (st != NNP_OK) st = nnp_fail(st, "%s: %s", path, nnp_last_error());
    }
    if (st == NNP_OK && (st = nnp_ani_finish(model)) != NNP_OK)
        st = nnp_fail(st, "%s: %s", path, nnp_last_error());
    if (st == NNP_OK && (st = join_path(path, sizeof path, dir, dir, lines[1])) == NNP_OK &&
        (st = read_text(path, &text, &size)) == NNP_OK) {
        st = parse_sae(text, size, model);
        free(text);
        if (st != NNP_OK) st = nnp_fail(st, "%s: %s", path, nnp_last_error());
    }
    /* Networks are stored member-major: networks[member * n_elements + element]. The array was
       sized for NNP_MAX_ELEMENTS per member; index with the real count. */
    if (st == NNP_OK && names_outside(lines[2])) st = outside_error(lines[2], dir);
    for (int32_t m = 0; st == NNP_OK && m < n_members; m++) {
        char netdir[4096];
        int n = snprintf(netdir, sizeof netdir, "%s%s%d/networks/", dir, lines[2], m);
        if (n < 0 || (size_t)n >= sizeof netdir) {
            st = nnp_fail(NNP_ERR_INVALID_ARGUMENT, "network path too long");
            break;
        }
        for (int32_t e = 0; st == NNP_OK && e < model->n_elements; e++)
            st = load_network(model, dir, netdir, e, &nnp_ani_of(model)->networks[m * model->n_elements + e]);
    }
    if (st != NNP_OK) {
        /* nnp_model_free walks n_members × n_elements networks; the unused tail is zeroed. */
        nnp_model_free(model);
        return st;
    }
    *out = model;
    return NNP_OK;
}
