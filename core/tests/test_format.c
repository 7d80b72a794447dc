/* The project's own model format: save → load gives identical energies; damage is detected. */
#include "test.h"

/* Energies (every member and the mean) and mean forces of a few molecules, in a fixed order. */
static int fingerprint(const nnp_model* model, double* out, int max) {
    nnp_plan* plan;
    CHECK_OK(nnp_plan_create(model, &plan));
    int count = 0;
    const char* files[] = {"molecules/druglike/drugbank-0030.xyz", "molecules/druglike/drugbank-0002.xyz"};
    for (int k = 0; k < 2; k++) {
        molecule m = read_molecule_or_die(files[k]);
        for (int32_t member = -1; member < nnp_model_num_members(model); member++) {
            CHECK_OK(nnp_plan_set_member(plan, member));
            double* f = malloc(sizeof(double) * 3 * (size_t)m.n);
            double e = single_energy(plan, m.n, m.z, m.pos, NULL, member < 0 ? f : NULL);
            if (count < max) out[count++] = e;
            if (member < 0)
                for (int32_t i = 0; i < 3 * m.n && count < max; i++) out[count++] = f[i];
            free(f);
        }
        free_molecule(&m);
    }
    nnp_plan_free(plan);
    return count;
}

/* CRC-32 (IEEE, as zlib), bitwise: an independent check of the library's table-driven one. */
static uint32_t crc32_bitwise(const unsigned char* p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static uint32_t rd32(const unsigned char* p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static void wr32(unsigned char* p, uint32_t v) {
    for (int k = 0; k < 4; k++) p[k] = (unsigned char)(v >> 8 * k);
}

/* A version-1 file (no family tag, no units) made from an ANI version-2 file: payload without the
   family id and the two units. */
static unsigned char* as_version_1(const unsigned char* v2, size_t size, size_t* out_size) {
    size_t name_len = rd32(v2 + 24);
    size_t payload = size - 24, cut_at = 28 + name_len;
    unsigned char* v1 = malloc(size);
    memcpy(v1, v2, 20);
    wr32(v1 + 8, 1);
    memcpy(v1 + 20, v2 + 24, 4 + name_len);
    memcpy(v1 + 24 + name_len, v2 + cut_at + 16, size - 4 - (cut_at + 16));
    size_t p1 = payload - 20;
    for (int k = 0; k < 8; k++) v1[12 + k] = (unsigned char)((uint64_t)p1 >> 8 * k);
    wr32(v1 + 20 + p1, crc32_bitwise(v1, 20 + p1));
    *out_size = 24 + p1;
    return v1;
}

static int same_fingerprint(const nnp_model* a, const nnp_model* b) {
    static double fa[512], fb[512];
    int na = fingerprint(a, fa, 512), nb = fingerprint(b, fb, 512);
    if (na != nb || na < 20) return 0;
    for (int i = 0; i < na; i++)
        if (fa[i] != fb[i]) return 0;
    return 1;
}

int main(void) {
    nnp_model* zoo = load_model_or_die("models/ani-model-zoo/ani-1x_8x.info");
    printf("loaded %s: %d members, %d elements, AEV %d, cutoff %g Å\n", nnp_model_name(zoo),
           nnp_model_num_members(zoo), nnp_model_num_elements(zoo), nnp_model_aev_length(zoo),
           nnp_model_cutoff(zoo));
    CHECK(strcmp(nnp_model_name(zoo), "ani-1x_8x") == 0);
    CHECK(nnp_model_num_members(zoo) == 8 && nnp_model_num_elements(zoo) == 4);
    CHECK(nnp_model_aev_length(zoo) == 384);

    /* Buffer round trip. */
    void* buf;
    size_t size;
    CHECK_OK(nnp_model_save_buffer(zoo, &buf, &size));
    printf("own format: %zu bytes\n", size);
    const unsigned char* bytes = buf;
    CHECK(rd32(bytes + 8) == 2 && rd32(bytes + 20) == NNP_FAMILY_ANI);
    CHECK(rd32(bytes + size - 4) == crc32_bitwise(bytes, size - 4));
    /* A version-1 file still loads, as ANI in Å and Hartree. */
    size_t size1;
    unsigned char* v1 = as_version_1(bytes, size, &size1);
    nnp_model* old;
    CHECK_OK(nnp_model_load_buffer(v1, size1, &old));
    if (old) {
        CHECK(nnp_model_family(old) == NNP_FAMILY_ANI);
        CHECK(same_fingerprint(zoo, old));
        nnp_model_free(old);
    }
    free(v1);
    nnp_model* back;
    CHECK_OK(nnp_model_load_buffer(buf, size, &back));
    CHECK(same_fingerprint(zoo, back));
    CHECK(strcmp(nnp_model_name(back), "ani-1x_8x") == 0);
    /* Saving is deterministic. */
    void* buf2;
    size_t size2;
    CHECK_OK(nnp_model_save_buffer(back, &buf2, &size2));
    CHECK(size2 == size && memcmp(buf, buf2, size) == 0);
    nnp_free(buf2);
    nnp_model_free(back);

    /* File round trip. */
    char path[4200];
    snprintf(path, sizeof path, "%s/test_format_roundtrip.nnpm", NNP_BUILD_DIR);
    CHECK_OK(nnp_model_save(zoo, path));
    nnp_model* from_file;
    CHECK_OK(nnp_model_load(path, &from_file));
    CHECK(same_fingerprint(zoo, from_file));
    nnp_model_free(from_file);

    /* The file written by the conversion tool (CTest fixture core.convert_tool). */
    snprintf(path, sizeof path, "%s/ani-1x_8x.nnpm", NNP_BUILD_DIR);
    nnp_model* converted;
    CHECK_OK(nnp_model_load(path, &converted));
    if (converted) {
        CHECK(same_fingerprint(zoo, converted));
        nnp_model_free(converted);
    }

    /* Damage: every kind is refused with a clear message, never loaded. */
    unsigned char* bad = malloc(size + 16);
    nnp_model* m = NULL;
    memcpy(bad, buf, size);
    bad[size / 2] ^= 0x01;
    CHECK_FAILS(nnp_model_load_buffer(bad, size, &m), NNP_ERR_FORMAT, "corrupt");
    memcpy(bad, buf, size);
    CHECK_FAILS(nnp_model_load_buffer(bad, size - 1000, &m), NNP_ERR_FORMAT, "truncated");
    CHECK_FAILS(nnp_model_load_buffer(bad, 12, &m), NNP_ERR_FORMAT, "truncated");
    memset(bad + size, 0, 16);
    CHECK_FAILS(nnp_model_load_buffer(bad, size + 16, &m), NNP_ERR_FORMAT, "trailing");
    bad[8] = 3; /* format version 3 */
    CHECK_FAILS(nnp_model_load_buffer(bad, size, &m), NNP_ERR_FORMAT, "format version 3");
    memcpy(bad, buf, size);
    wr32(bad + 20, 7); /* an unknown family, with a valid CRC */
    wr32(bad + size - 4, crc32_bitwise(bad, size - 4));
    CHECK_FAILS(nnp_model_load_buffer(bad, size, &m), NNP_ERR_FORMAT, "unknown model family 7");
    memcpy(bad, buf, size);
    bad[0] = 'X';
    CHECK_FAILS(nnp_model_load_buffer(bad, size, &m), NNP_ERR_FORMAT, "magic");
    CHECK(m == NULL);
    /* A truncated file on disk, through nnp_model_load. */
    snprintf(path, sizeof path, "%s/test_format_truncated.nnpm", NNP_BUILD_DIR);
    FILE* f = fopen(path, "wb");
    fwrite(buf, 1, size / 3, f);
    fclose(f);
    CHECK_FAILS(nnp_model_load(path, &m), NNP_ERR_FORMAT, "truncated");
    CHECK(m == NULL);
    free(bad);
    nnp_free(buf);
    nnp_model_free(zoo);
    return test_finish("test_format");
}
