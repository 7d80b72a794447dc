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
 *   the family's payload: ANI's in core/models/ani/ani.c, TensorNet's in core/models/tensornet/tensornet.c
 * Payload of version 1 (ANI only, Å and Hartree): u32 name length, name bytes, ANI's payload.
 *
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
        if (got >= 4 && memcmp(head, "PK\3\4", 4) == 0) {
            fclose(f);
            return nnp_fail(NNP_ERR_FORMAT, "'%s' is not a model but a zip archive: a torchmd-net checkpoint (.ckpt) or "
                            "ensemble (.zip) is converted once into an .nnpm file, without PyTorch: python -m "
                            "openmmnnp.models convert '%s' OUT.nnpm (in Python, NNPForce converts a path ending in "
                            ".ckpt or .zip on first use)", path, path);
        }
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

const nnp_family* nnp_family_by_id(uint32_t id) {
    if (id == NNP_FAMILY_ANI) return &nnp_family_ani;
    if (id == NNP_FAMILY_TENSORNET) return &nnp_family_tensornet;
    return NULL;
}
