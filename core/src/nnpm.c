/*
 * The project's own single-file model format (".nnpm"), version 2. All integers little-endian.
 *
 *   offset 0   8 bytes   magic "NNPMODEL"
 *          8   u32       format version (2; version 1 is still read)
 *         12   u64       payload size P
 *         20   P bytes   payload
 *       20+P   u32       CRC-32 (IEEE, as zlib) of bytes 0 .. 20+P-1
 *
 * Payload of version 2:
 *   u32 family (nnp_family_id: 1 ANI, 2 TensorNet)
 *   u32 name length, name bytes
 *   f64 energy unit in kJ/mol, f64 length unit in Å (the model's own units)
 *   the family's payload: ANI's below, TensorNet's in core/models/tensornet/tensornet.c
 * Payload of version 1 (ANI only, Å and Hartree): u32 name length, name bytes, ANI's payload.
 *
 * ANI's payload:
 *   f64 Rcr, f64 Rca (Å)
 *   6 × (u32 n, n × f64): EtaR, ShfR, EtaA, Zeta, ShfA, ShfZ
 *   u32 element count E; E × (u32 atomic number, f64 self energy in Hartree)
 *   u32 member count M
 *   M × E networks (member-major, elements in the order above), each:
 *     u32 layer count L; L × (u32 inputs, u32 outputs, u32 activation,
 *                             inputs × outputs f32 weights (row per output), outputs f32 biases)
 * The payload must be consumed exactly. Readers reject other versions with a clear message.
 */
#include "internal.h"
#include "nnpm_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NNPM_MAGIC "NNPMODEL"
#define NNPM_VERSION 2u
#define NNPM_HEADER 20u
#define NNPM_MAX_SIZE ((uint64_t)1 << 32)

static uint32_t crc32_update(uint32_t crc, const unsigned char* data, size_t n) {
    static uint32_t table[256];
    static int ready = 0; /* benign race: every thread writes the same values */
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

static void ani_write_payload(writer* w, const nnp_model* model) {
    const nnp_aev_params* p = &model->aev;
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
        put_u32(w, (uint32_t)model->atomic_numbers[e]);
        put_f64(w, model->self_energies[e]);
    }
    put_u32(w, (uint32_t)model->n_members);
    for (int32_t i = 0; i < model->n_members * model->n_elements; i++) {
        const nnp_network* net = &model->networks[i];
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

nnp_status nnp_model_save_buffer(const nnp_model* model, void** data, size_t* size) {
    if (model == NULL || data == NULL || size == NULL)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_model_save_buffer: NULL argument");
    writer w = {0};
    put_bytes(&w, NNPM_MAGIC, 8);
    put_u32(&w, NNPM_VERSION);
    put_u64(&w, 0); /* payload size, patched below */
    put_u32(&w, (uint32_t)model->family->id);
    uint32_t name_len = (uint32_t)strlen(model->name);
    put_u32(&w, name_len);
    put_bytes(&w, model->name, name_len);
    put_f64(&w, model->energy_to_kjmol);
    put_f64(&w, model->length_to_angstrom);
    model->family->write_payload(&w, model);
    if (w.failed) {
        free(w.data);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory writing the model");
    }
    uint64_t payload = w.size - NNPM_HEADER;
    for (int k = 0; k < 8; k++) w.data[12 + k] = (unsigned char)(payload >> (8 * k));
    put_u32(&w, crc32_update(0, w.data, w.size));
    if (w.failed) {
        free(w.data);
        return nnp_fail(NNP_ERR_MEMORY, "out of memory writing the model");
    }
    *data = w.data;
    *size = w.size;
    return NNP_OK;
}

nnp_status nnp_model_save(const nnp_model* model, const char* path) {
    if (model == NULL || path == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_model_save: NULL argument");
    void* data;
    size_t size;
    nnp_status st = nnp_model_save_buffer(model, &data, &size);
    if (st != NNP_OK) return st;
    /* Write to a temporary file and rename, so a failed write never leaves a half file. */
    char tmp[4200];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        free(data);
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "path too long: %s", path);
    }
    FILE* f = fopen(tmp, "wb");
    if (f == NULL) {
        free(data);
        return nnp_fail(NNP_ERR_IO, "cannot create '%s'", tmp);
    }
    int ok = fwrite(data, 1, size, f) == size;
    ok = (fclose(f) == 0) && ok;
    free(data);
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return nnp_fail(NNP_ERR_IO, "cannot write '%s'", path);
    }
    return NNP_OK;
}

static nnp_status read_name(reader* r, char* name, size_t size) {
    uint32_t name_len = get_u32(r);
    if (name_len >= size) return nnp_fail(NNP_ERR_FORMAT, "model file: name too long");
    if (!get_bytes(r, name, name_len)) return nnp_fail(NNP_ERR_FORMAT, "model file is truncated");
    name[name_len] = '\0';
    if (strlen(name) != name_len) return nnp_fail(NNP_ERR_FORMAT, "model file: bad name");
    return NNP_OK;
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
    model->networks = calloc((size_t)n_members * n_elements, sizeof *model->networks);
    if (model->networks == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    model->n_members = (int32_t)n_members;
    model->n_elements = (int32_t)n_elements;
    model->aev = p;
    memcpy(model->atomic_numbers, z, n_elements * sizeof z[0]);
    memcpy(model->self_energies, sae, n_elements * sizeof sae[0]);
    st = nnp_model_finish(model);
    for (uint32_t i = 0; st == NNP_OK && i < n_members * n_elements; i++) {
        nnp_network* net = &model->networks[i];
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
            st = nnp_network_check(model, net, what);
        }
    }
    if (st == NNP_OK && r->short_read) st = nnp_fail(NNP_ERR_FORMAT, "model file is truncated");
    return st;
}

static nnp_status read_payload(reader* r, uint32_t version, nnp_model** out) {
    char name[sizeof((nnp_model*)0)->name];
    const nnp_family* family = &nnp_family_ani;
    double energy_unit = NNP_HARTREE_TO_KJMOL, length_unit = 1.0;
    nnp_status st;
    if (version >= 2) {
        uint32_t id = get_u32(r);
        family = nnp_family_by_id(id);
        if (family == NULL)
            return nnp_fail(NNP_ERR_FORMAT, "model file: unknown model family %u (this library, %s, reads 1 = ANI "
                            "and 2 = TensorNet)", id, nnp_version());
        if ((st = read_name(r, name, sizeof name)) != NNP_OK) return st;
        energy_unit = get_f64(r);
        length_unit = get_f64(r);
        if (r->short_read) return nnp_fail(NNP_ERR_FORMAT, "model file is truncated");
        if (!(energy_unit > 0 && energy_unit < 1e12) || !(length_unit > 0 && length_unit < 1e12))
            return nnp_fail(NNP_ERR_FORMAT, "model file: units %g kJ/mol, %g Å are not valid", energy_unit,
                            length_unit);
    } else if ((st = read_name(r, name, sizeof name)) != NNP_OK) {
        return st;
    }
    nnp_model* model = calloc(1, sizeof *model);
    if (model == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory");
    memcpy(model->name, name, strlen(name) + 1);
    model->family = family;
    model->energy_to_kjmol = energy_unit;
    model->length_to_angstrom = length_unit;
    st = family->read_payload(r, model);
    if (st == NNP_OK && r->short_read) st = nnp_fail(NNP_ERR_FORMAT, "model file is truncated");
    if (st == NNP_OK && r->left != 0)
        st = nnp_fail(NNP_ERR_FORMAT, "model file: %zu unexpected bytes after the %s model", r->left, family->name);
    if (st != NNP_OK) {
        nnp_model_free(model);
        return st;
    }
    *out = model;
    return NNP_OK;
}

int nnp_is_nnpm(const void* data, size_t size) {
    return size >= 8 && memcmp(data, NNPM_MAGIC, 8) == 0;
}

nnp_status nnp_model_load_buffer(const void* data, size_t size, nnp_model** model) {
    if (data == NULL || model == NULL)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_model_load_buffer: NULL argument");
    nnp_clear_error();
    const unsigned char* bytes = data;
    if (!nnp_is_nnpm(data, size))
        return nnp_fail(NNP_ERR_FORMAT, "not an openmm-nnp model file (bad magic bytes)");
    reader r = {bytes + 8, size - 8, 0};
    uint32_t version = get_u32(&r);
    uint64_t payload = get_u64(&r);
    if (r.short_read) return nnp_fail(NNP_ERR_FORMAT, "model file is truncated (%zu bytes)", size);
    if (version < 1 || version > NNPM_VERSION)
        return nnp_fail(NNP_ERR_FORMAT, "model file has format version %u; this library (%s) reads "
                        "versions 1 to %u", version, nnp_version(), NNPM_VERSION);
    if (payload > NNPM_MAX_SIZE || (uint64_t)size != NNPM_HEADER + payload + 4)
        return nnp_fail(NNP_ERR_FORMAT, "model file has %zu bytes, its header says %llu: %s", size,
                        (unsigned long long)(NNPM_HEADER + payload + 4),
                        (uint64_t)size < NNPM_HEADER + payload + 4 ? "truncated" : "trailing data");
    reader tail = {bytes + size - 4, 4, 0};
    uint32_t stored = get_u32(&tail);
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    uint32_t actual = crc32_update(0, bytes, size - 4);
    if (stored != actual)
        return nnp_fail(NNP_ERR_FORMAT, "model file is corrupt (CRC-32 %08x, expected %08x)", actual, stored);
#else
    (void)stored;
#endif
    r.left = (size_t)payload;
    return read_payload(&r, version, model);
}

nnp_status nnp_model_load(const char* path, nnp_model** model) {
    if (path == NULL || model == NULL) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_model_load: NULL argument");
    nnp_clear_error();
    char resolved[4096];
    nnp_status found = nnp_model_find(path, resolved, sizeof resolved);
    if (found != NNP_OK) return found;
    path = resolved;
    /* Opened once and read as a stream: a pipe or /dev/stdin works; sizes are checked before the
       bulk of a regular file is read. */
    FILE* f = fopen(path, "rb");
    if (f == NULL) return nnp_fail(NNP_ERR_IO, "cannot open model file '%s'", path);
    unsigned char head[NNPM_HEADER];
    size_t got = fread(head, 1, sizeof head, f);
    long long bytes = nnp_regular_file_size(f);
    if (got == 0) {
        int failed = ferror(f);
        fclose(f);
        return failed ? nnp_fail(NNP_ERR_IO, "error reading model file '%s'", path)
                      : nnp_fail(NNP_ERR_FORMAT, "model file '%s' is empty", path);
    }
    unsigned char* data;
    size_t size;
    nnp_status st;
    if (nnp_is_nnpm(head, got)) {
        /* Read what the header announces and one byte more (trailing data), whatever the source: a
           pipe is not read to its end. */
        size_t limit = (size_t)(NNPM_MAX_SIZE + NNPM_HEADER + 4);
        if (got == NNPM_HEADER) {
            reader r = {head + 8, NNPM_HEADER - 8, 0};
            (void)get_u32(&r);
            uint64_t payload = get_u64(&r);
            if (payload > NNPM_MAX_SIZE) {
                fclose(f);
                return nnp_fail(NNP_ERR_FORMAT, "%s: the header announces %llu bytes, more than a model may have (%llu)",
                                path, (unsigned long long)payload, (unsigned long long)NNPM_MAX_SIZE);
            }
            if (bytes >= 0 && (uint64_t)bytes != NNPM_HEADER + payload + 4) {
                fclose(f);
                return nnp_fail(NNP_ERR_FORMAT, "%s: model file has %lld bytes, its header says %llu: %s", path, bytes,
                                (unsigned long long)(NNPM_HEADER + payload + 4),
                                (uint64_t)bytes < NNPM_HEADER + payload + 4 ? "truncated" : "trailing data");
            }
            limit = (size_t)(NNPM_HEADER + payload + 4);
        }
        st = nnp_read_rest(f, path, limit, head, got, &data, &size);
        fclose(f);
        if (st == NNP_ERR_FORMAT && got == NNPM_HEADER)
            return nnp_fail(st, "%s: more bytes than the %zu its header announces: trailing data", path, limit);
        if (st != NNP_OK) return st;
        st = nnp_model_load_buffer(data, size, model);
        free(data);
    } else {
        size_t n = strlen(path);
        if (memchr(head, '\0', got) != NULL || (n >= 5 && strcmp(path + n - 5, ".nnpm") == 0)) {
            fclose(f);
            return nnp_fail(NNP_ERR_FORMAT, "'%s' is not a model: not an .nnpm file (its first bytes are not the "
                            "magic \"" NNPM_MAGIC "\") and not a NeuroChem .info text file", path);
        }
        if (bytes > (long long)NNP_MAX_INFO) {
            fclose(f);
            return nnp_fail(NNP_ERR_FORMAT, "'%s' is not a model: not an .nnpm file, and at %lld bytes too large "
                            "for a NeuroChem .info file (4 lines of text)", path, bytes);
        }
        st = nnp_read_rest(f, path, NNP_MAX_INFO, head, got, &data, &size);
        fclose(f);
        if (st != NNP_OK) return st;
        st = nnp_model_load_neurochem_text(path, (const char*)data, size, model);
        free(data);
        return st;
    }
    if (st != NNP_OK) return nnp_fail(st, "%s: %s", path, nnp_last_error());
    return NNP_OK;
}

/* ------------------------------------------------------------------ families */

static double ani_cutoff(const nnp_model* model) { return model->aev.Rcr; }

static nnp_status ani_check_charge(const nnp_model* model, int32_t batch, int32_t charge) {
    if (charge == 0) return NNP_OK;
    return nnp_fail(NNP_ERR_UNSUPPORTED, "batch %d: total charge %d, but ANI model '%s' describes neutral molecules "
                    "only (a TensorNet model such as AceFF takes charges)", batch, charge, model->name);
}

nnp_status nnp_ani_evaluate_cpu(nnp_plan* plan, const double* pos, const double* box, double* atom_energy,
                                double* batch_energy, double* grad);

const nnp_family nnp_family_ani = {
    .id = NNP_FAMILY_ANI,
    .name = "ani",
    .read_payload = ani_read_payload,
    .write_payload = ani_write_payload,
    .free_data = NULL,
    .cutoff = ani_cutoff,
    .element_index = nnp_model_element_index,
    .check_charge = ani_check_charge,
    .evaluate_cpu = nnp_ani_evaluate_cpu,
};

const nnp_family* nnp_family_by_id(uint32_t id) {
    if (id == NNP_FAMILY_ANI) return &nnp_family_ani;
    if (id == NNP_FAMILY_TENSORNET) return &nnp_family_tensornet;
    return NULL;
}
