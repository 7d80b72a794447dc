/* Bad input of every kind gets a clear status and message, never a crash or a wrong number. */
#define _DEFAULT_SOURCE
#include "test.h"

#include <bzlib.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[4096];

/* Copies a file (the loader refuses symbolic links that leave a model's folder). */
static void copy_file(const char* from, const char* to) {
    FILE* in = fopen(from, "rb");
    FILE* out = fopen(to, "wb");
    CHECK(in != NULL && out != NULL);
    char buf[65536];
    for (size_t got; in && out && (got = fread(buf, 1, sizeof buf, in)) > 0;) CHECK(fwrite(buf, 1, got, out) == got);
    if (in) fclose(in);
    if (out) fclose(out);
}

/* A one-member copy of the ANI-1x zoo in a fresh directory, so that a test can replace just the
   file it damages. Returns the .info path. */
static const char* make_zoo(const char* tag) {
    static char info[4300];
    char dir[4100], nets[4200], src[4200], from[4600], to[4600];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, tag);
    snprintf(nets, sizeof nets, "%s/net0/networks", dir);
    mkdir(dir, 0755);
    snprintf(to, sizeof to, "%s/net0", dir);
    mkdir(to, 0755);
    mkdir(nets, 0755);
    const char* zoo = shared_path("models/ani-model-zoo/ani-1x_8x");
    snprintf(from, sizeof from, "%s/rHCNO-5.2R_16-3.5A_a4-8.params", zoo);
    snprintf(to, sizeof to, "%s/const.params", dir);
    copy_file(from, to);
    snprintf(from, sizeof from, "%s/sae_linfit.dat", zoo);
    snprintf(to, sizeof to, "%s/sae.dat", dir);
    copy_file(from, to);
    snprintf(src, sizeof src, "%s/train0/networks", zoo);
    DIR* d = opendir(src);
    CHECK(d != NULL);
    for (struct dirent* e; d && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        snprintf(from, sizeof from, "%s/%s", src, e->d_name);
        snprintf(to, sizeof to, "%s/%s", nets, e->d_name);
        copy_file(from, to);
    }
    if (d) closedir(d);
    snprintf(info, sizeof info, "%s/model.info", dir);
    FILE* f = fopen(info, "w");
    fprintf(f, "const.params\nsae.dat\nnet\n1\n");
    fclose(f);
    return info;
}

/* Replaces a file of a zoo copy by the given bytes. */
static void replace(const char* tag, const char* rel, const void* data, size_t size) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s/%s", tmpdir, tag, rel);
    unlink(path);
    FILE* f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fwrite(data, 1, size, f);
        fclose(f);
    }
}

static unsigned char* slurp(const char* path, size_t* size) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char* data = malloc((size_t)n + 1);
    *size = fread(data, 1, (size_t)n, f);
    fclose(f);
    return data;
}

/* An .nnf whose decompressed text has `from` replaced by `to` (same length). */
static unsigned char* edited_nnf(const char* src, const char* from, const char* to, size_t* size) {
    size_t n;
    unsigned char* orig = slurp(src, &n);
    unsigned char* eq = memchr(orig, '=', n);
    unsigned int tlen = 1u << 16;
    char* text = malloc(tlen);
    CHECK(BZ2_bzBuffToBuffDecompress(text, &tlen, (char*)eq + 2, (unsigned)(n - (size_t)(eq + 2 - orig)), 0, 0) == BZ_OK);
    char* at = strstr(text, from);
    CHECK(at != NULL && strlen(from) == strlen(to));
    if (at) memcpy(at, to, strlen(to));
    unsigned int clen = 1u << 16;
    unsigned char* out = malloc(clen + 32);
    int head = sprintf((char*)out, "%u=\n", tlen);
    CHECK(BZ2_bzBuffToBuffCompress((char*)out + head, &clen, text, tlen, 9, 0, 0) == BZ_OK);
    *size = (size_t)head + clen;
    free(orig);
    free(text);
    return out;
}

static void* other_thread(void* arg) {
    (void)arg;
    nnp_model* m;
    nnp_model_load("/nonexistent/thread.info", &m);
    return NULL;
}

int main(void) {
    DIR* zoo = opendir(shared_path("models/ani-model-zoo/ani-1x_8x/train0/networks"));
    if (zoo == NULL) {
        printf("test_errors: skipped: the NeuroChem files of the ANI-1x model zoo are not in %s\n", shared_path("models"));
        return 77;
    }
    closedir(zoo);
    snprintf(tmpdir, sizeof tmpdir, "%s/test_errors.XXXXXX", NNP_BUILD_DIR);
    CHECK(mkdtemp(tmpdir) != NULL);
    nnp_model* m = NULL;

    printf("files:\n");
    CHECK_FAILS(nnp_model_load("/nonexistent/model.info", &m), NNP_ERR_IO, "/nonexistent/model.info");
    nnp_model* ok_model = NULL;
    CHECK_OK(nnp_model_load(make_zoo("good"), &ok_model));
    CHECK(ok_model != NULL && nnp_model_num_members(ok_model) == 1);

    const char* info = make_zoo("missing");
    char path[4400];
    snprintf(path, sizeof path, "%s/missing/net0/networks/ANN-N.nnf", tmpdir);
    unlink(path);
    CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_IO, "ANN-N.nnf");

    /* Nothing outside the model's folder is read: not through the network prefix, not through a
       symbolic link (and the foreign file's text is not quoted). */
    info = make_zoo("escape");
    char escape_info[200];
    snprintf(escape_info, sizeof escape_info, "const.params\nsae.dat\n../good/net\n1\n");
    replace("escape", "model.info", escape_info, strlen(escape_info));
    CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_FORMAT, "outside its folder");
    snprintf(escape_info, sizeof escape_info, "const.params\nsae.dat\nnet\n1\n");
    replace("escape", "model.info", escape_info, strlen(escape_info));
    CHECK_OK(nnp_model_load(info, &m));
    nnp_model_free(m);
    m = NULL;
    snprintf(path, sizeof path, "%s/escape/sae.dat", tmpdir);
    unlink(path);
    CHECK(symlink("/etc/passwd", path) == 0);
    CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_FORMAT, "outside the model's folder");
    CHECK(strstr(nnp_last_error(), "root:") == NULL);
    unlink(path);
    char inside[4400];
    snprintf(inside, sizeof inside, "%s/escape/sae-copy.dat", tmpdir);
    copy_file(shared_path("models/ani-model-zoo/ani-1x_8x/sae_linfit.dat"), inside);
    CHECK(symlink("sae-copy.dat", path) == 0); /* a link that stays inside is fine */
    CHECK_OK(nnp_model_load(info, &m));
    nnp_model_free(m);
    m = NULL;

    /* A streamed .nnpm is read as far as its header says and one byte more, never to its end. */
    {
        void* buf;
        size_t size;
        CHECK_OK(nnp_model_save_buffer(ok_model, &buf, &size));
        int fds[2];
        CHECK(pipe(fds) == 0);
        pid_t child = fork();
        if (child == 0) { /* writes the model and then 64 MiB more, as long as the reader reads */
            close(fds[0]);
            signal(SIGPIPE, SIG_IGN); /* the reader closing its end is the expected way out */
            size_t off = 0;
            while (off < size) {
                ssize_t k = write(fds[1], (char*)buf + off, size - off);
                if (k <= 0) _exit(0);
                off += (size_t)k;
            }
            static char zeros[1 << 16];
            for (int k = 0; k < 1024; k++)
                if (write(fds[1], zeros, sizeof zeros) <= 0) _exit(0);
            _exit(1); /* everything was read: the reader read past what the header announced */
        }
        close(fds[1]);
        char dev[64];
        snprintf(dev, sizeof dev, "/dev/fd/%d", fds[0]);
        CHECK_FAILS(nnp_model_load(dev, &m), NNP_ERR_FORMAT, "trailing data");
        close(fds[0]);
        int wstatus = 0;
        CHECK(waitpid(child, &wstatus, 0) == child);
        CHECK(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
        nnp_free(buf);
    }

    info = make_zoo("truncated");
    size_t n;
    unsigned char* w = slurp(shared_path("models/ani-model-zoo/ani-1x_8x/train0/networks/ANN-C.nnf-l2.wparam"), &n);
    replace("truncated", "net0/networks/ANN-C.nnf-l2.wparam", w, n - 4);
    CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_FORMAT, "truncated");
    replace("truncated", "net0/networks/ANN-C.nnf-l2.wparam", w, n);
    replace("truncated", "net0/networks/ANN-C.nnf-l2.bparam", w, 8);
    CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_FORMAT, "ANN-C.nnf-l2.bparam");
    /* A NaN weight. */
    float nan_value = NAN;
    memcpy(w + 40, &nan_value, 4);
    replace("truncated", "net0/networks/ANN-C.nnf-l2.bparam", w, 4 * 128);
    unsigned char* good_b = slurp(shared_path("models/ani-model-zoo/ani-1x_8x/train0/networks/ANN-C.nnf-l2.bparam"), &n);
    if (n >= 48) {
        memcpy(good_b + 40, &nan_value, 4);
        replace("truncated", "net0/networks/ANN-C.nnf-l2.bparam", good_b, n);
        CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_FORMAT, "non-finite bias");
    } else {
        fprintf(stderr, "unexpected size of ANN-C.nnf-l2.bparam: %zu\n", n);
        test_failures++;
    }
    free(good_b);
    free(w);

    info = make_zoo("garbage");
    const char garbage[] = "this is not a network file at all";
    replace("garbage", "net0/networks/ANN-H.nnf", garbage, sizeof garbage);
    CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_FORMAT, "ANN-H.nnf");
    const char bad_bz[] = "1114=\nBZh91AY&SYgarbage-garbage-garbage";
    replace("garbage", "net0/networks/ANN-H.nnf", bad_bz, sizeof bad_bz - 1);
    CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_FORMAT, "bzip2");
    size_t nnf_size;
    const char* h_nnf = shared_path("models/ani-model-zoo/ani-1x_8x/train0/networks/ANN-H.nnf");
    unsigned char* nnf = edited_nnf(h_nnf, "nodes=128;", "nodes=129;", &nnf_size);
    replace("garbage", "net0/networks/ANN-H.nnf", nnf, nnf_size);
    CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_FORMAT, "inconsistent");
    free(nnf);
    nnf = edited_nnf(h_nnf, "activation=9;", "activation=5;", &nnf_size);
    replace("garbage", "net0/networks/ANN-H.nnf", nnf, nnf_size);
    CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_FORMAT, "activation 5");
    free(nnf);
    nnf = edited_nnf(h_nnf, "FILE:ANN-H.nnf-l1", "FILE:../../../etc", &nnf_size);
    replace("garbage", "net0/networks/ANN-H.nnf", nnf, nnf_size);
    CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_FORMAT, "bad value for weights");
    free(nnf);

    info = make_zoo("constants");
    const char no_rca[] = "Rcr = 5.2\nEtaR = [16.0]\nShfR = [0.9,1.1]\nZeta = [32.0]\nShfZ = [0.2]\n"
                          "EtaA = [8.0]\nShfA = [0.9]\nAtyp = [H,C,N,O]\n";
    replace("constants", "const.params", no_rca, sizeof no_rca - 1);
    CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_FORMAT, "Rca is missing");
    const char wrong_aev[] = "Rcr = 5.2\nRca = 3.5\nEtaR = [16.0]\nShfR = [0.9,1.1]\nZeta = [32.0]\nShfZ = [0.2]\n"
                             "EtaA = [8.0]\nShfA = [0.9]\nAtyp = [H,C,N,O]\n";
    replace("constants", "const.params", wrong_aev, sizeof wrong_aev - 1);
    CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_FORMAT, "AEV of");
    const char bad_sae[] = "H,0=-0.6\nC,1=-38.08\nN,2=-54.7\n";
    info = make_zoo("sae");
    replace("sae", "sae.dat", bad_sae, sizeof bad_sae - 1);
    CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_FORMAT, "O is missing");
    const char bad_info[] = "const.params\nsae.dat\n";
    replace("sae", "model.info", bad_info, sizeof bad_info - 1);
    CHECK_FAILS(nnp_model_load(info, &m), NNP_ERR_FORMAT, "expected 4 lines");
    CHECK(m == NULL);

    printf("atoms and coordinates:\n");
    nnp_plan* plan = NULL;
    CHECK_OK(nnp_plan_create(ok_model, &plan));
    const int32_t z_s[3] = {6, 16, 1}, b0[3] = {0, 0, 0};
    CHECK_FAILS(nnp_plan_set_atoms(plan, 3, z_s, b0), NNP_ERR_ELEMENT, "element S (atomic number 16)");
    const int32_t z_x[3] = {6, 0, 1};
    CHECK_FAILS(nnp_plan_set_atoms(plan, 3, z_x, b0), NNP_ERR_ELEMENT, "atomic number 0");
    const int32_t z_ok[3] = {6, 1, 1}, b_neg[3] = {0, -1, 0};
    CHECK_FAILS(nnp_plan_set_atoms(plan, 3, z_ok, b_neg), NNP_ERR_BATCH, "batch index -1");
    CHECK_FAILS(nnp_plan_set_atoms(plan, -2, z_ok, b0), NNP_ERR_INVALID_ARGUMENT, "n_atoms");
    CHECK_OK(nnp_plan_set_atoms(plan, 3, z_ok, b0));
    double pos[9] = {0, 0, 0, 1.09, 0, 0, -0.3, 1.0, 0};
    double e = 12345, be[1] = {12345}, f[9];
    double box_small[9] = {7.287, 0, 0, 0, 9.2, 0, 0, 0, 6.688};
    double box_skew[9] = {11, 0, 0, 8, 11, 0, 0, 0, 11};
    double box_nan[9] = {11, 0, 0, 0, NAN, 0, 0, 0, 11};
    CHECK_FAILS(nnp_evaluate_cpu(plan, pos, box_small, &e, be, f), NNP_ERR_BOX, "smaller than twice");
    CHECK_FAILS(nnp_evaluate_cpu(plan, pos, box_skew, &e, be, f), NNP_ERR_BOX, "reduced");
    CHECK_FAILS(nnp_evaluate_cpu(plan, pos, box_nan, &e, be, f), NNP_ERR_NONFINITE, "box");
    pos[4] = NAN;
    CHECK_FAILS(nnp_evaluate_cpu(plan, pos, NULL, &e, be, f), NNP_ERR_NONFINITE, "coordinate y of atom 1");
    pos[4] = INFINITY;
    CHECK_FAILS(nnp_evaluate_cpu(plan, pos, NULL, &e, be, f), NNP_ERR_NONFINITE, "atom 1");
    pos[4] = 0;
    memcpy(&pos[6], &pos[3], 3 * sizeof(double));
    CHECK_FAILS(nnp_evaluate_cpu(plan, pos, NULL, &e, be, f), NNP_ERR_INVALID_ARGUMENT, "same position");
    CHECK(e == 12345 && be[0] == 12345); /* outputs untouched on failure */
    CHECK_FAILS(nnp_plan_set_member(plan, 1), NNP_ERR_INVALID_ARGUMENT, "member 1");
    CHECK_FAILS(nnp_plan_set_member(plan, -2), NNP_ERR_INVALID_ARGUMENT, "member -2");
    CHECK_FAILS(nnp_plan_set_units(plan, (nnp_units)7), NNP_ERR_INVALID_ARGUMENT, "units");

    printf("NULL pointers:\n");
    CHECK_FAILS(nnp_model_load(NULL, &m), NNP_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_FAILS(nnp_model_load(info, NULL), NNP_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_FAILS(nnp_model_load_buffer(NULL, 10, &m), NNP_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_FAILS(nnp_model_save(NULL, "x"), NNP_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_FAILS(nnp_model_save_buffer(ok_model, NULL, &n), NNP_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_FAILS(nnp_plan_create(NULL, &plan), NNP_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_FAILS(nnp_plan_set_atoms(NULL, 3, z_ok, b0), NNP_ERR_INVALID_ARGUMENT, "plan is NULL");
    CHECK_FAILS(nnp_plan_set_atoms(plan, 3, NULL, b0), NNP_ERR_INVALID_ARGUMENT, "atomic_numbers is NULL");
    CHECK_FAILS(nnp_plan_set_atoms(plan, 3, z_ok, NULL), NNP_ERR_INVALID_ARGUMENT, "batches is NULL");
    CHECK_FAILS(nnp_evaluate_cpu(NULL, pos, NULL, &e, NULL, NULL), NNP_ERR_INVALID_ARGUMENT, "plan is NULL");
    CHECK_FAILS(nnp_evaluate_cpu(plan, NULL, NULL, &e, NULL, NULL), NNP_ERR_INVALID_ARGUMENT, "positions is NULL");
    CHECK_FAILS(nnp_model_self_energy(NULL, 1, &e), NNP_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_FAILS(nnp_model_self_energy(ok_model, 17, &e), NNP_ERR_ELEMENT, "atomic number 17");
    CHECK_FAILS(nnp_xyz_read(NULL, NULL, NULL, NULL, NULL, NULL), NNP_ERR_INVALID_ARGUMENT, "NULL");
    CHECK(nnp_model_num_members(NULL) == 0 && nnp_plan_num_batches(NULL) == -1 && nnp_model_element(ok_model, 9) == -1);
    nnp_model_free(NULL);
    nnp_plan_free(NULL);
    nnp_free(NULL);

    printf("XYZ files:\n");
    int32_t na, *zz;
    double* pp;
    const char bad_xyz[] = "3\ncomment\nC 0 0 0\nH 1 0\n";
    replace("sae", "bad.xyz", bad_xyz, sizeof bad_xyz - 1);
    snprintf(path, sizeof path, "%s/sae/bad.xyz", tmpdir);
    CHECK_FAILS(nnp_xyz_read(path, &na, &zz, &pp, NULL, NULL), NNP_ERR_FORMAT, "atom line 2");
    const char xx_xyz[] = "1\n\nXx 0 0 0\n";
    replace("sae", "bad.xyz", xx_xyz, sizeof xx_xyz - 1);
    CHECK_FAILS(nnp_xyz_read(path, &na, &zz, &pp, NULL, NULL), NNP_ERR_ELEMENT, "Xx");

    printf("model names:\n");
    {
        char found[4096], folders[8192], dir[4200], file[4300];
        snprintf(dir, sizeof dir, "%s/names", tmpdir);
        CHECK(mkdir(dir, 0755) == 0);
        setenv("NNP_MODEL_PATH", dir, 1);
        CHECK_OK(nnp_model_search_path(folders, sizeof folders));
        CHECK(strncmp(folders, dir, strlen(dir)) == 0 && strstr(folders, "/share/openmm-nnp/models\n") != NULL);
        /* A name found nowhere: every place is listed, and how to get the model. */
        CHECK_FAILS(nnp_model_load("ani9z", &m), NNP_ERR_IO, "model 'ani9z' not found");
        CHECK(strstr(nnp_last_error(), dir) != NULL && strstr(nnp_last_error(), "pip install openmm-nnp-models") != NULL);
        /* A name in NNP_MODEL_PATH: found and loaded (here the zoo copy, saved under the name). */
        snprintf(file, sizeof file, "%s/tiny.nnpm", dir);
        CHECK_OK(nnp_model_save(ok_model, file));
        CHECK_OK(nnp_model_find("tiny", found, sizeof found));
        CHECK(strcmp(found, file) == 0);
        nnp_model* named = NULL;
        CHECK_OK(nnp_model_load("tiny", &named));
        CHECK(named != NULL && nnp_model_num_members(named) == 1);
        nnp_model_free(named);
        /* Paths stay paths; a too-small buffer is an error, not a cut path. */
        CHECK_OK(nnp_model_find("./tiny", found, sizeof found));
        CHECK(strcmp(found, "./tiny") == 0);
        CHECK_FAILS(nnp_model_find("tiny", found, 8), NNP_ERR_INVALID_ARGUMENT, "longer than the buffer");
        /* Every folder of NNP_MODEL_PATH is searched, however many: here the model is in the 35th of 40. */
        {
            static char many[40 * 4300];
            size_t len = 0;
            for (int k = 1; k <= 40; k++) {
                char sub[4300];
                snprintf(sub, sizeof sub, "%s/many%02d", tmpdir, k);
                mkdir(sub, 0755);
                len += (size_t)snprintf(many + len, sizeof many - len, "%s%s", k > 1 ? ":" : "", sub);
            }
            setenv("NNP_MODEL_PATH", many, 1);
            snprintf(file, sizeof file, "%s/many35/deep.nnpm", tmpdir);
            CHECK_OK(nnp_model_save(ok_model, file));
            CHECK_OK(nnp_model_find("deep", found, sizeof found));
            CHECK(strcmp(found, file) == 0);
            /* An entry longer than any path is an error that says so, not skipped. */
            static char longer[6000];
            memset(longer, 'x', 5000);
            snprintf(longer + 5000, sizeof longer - 5000, ":%s", dir);
            setenv("NNP_MODEL_PATH", longer, 1);
            CHECK_FAILS(nnp_model_find("tiny", found, sizeof found), NNP_ERR_INVALID_ARGUMENT, "entry 1 is 5000 characters");
            setenv("NNP_MODEL_PATH", dir, 1);
        }
        /* A name of 64 characters is not silently a path; a file named like a name gets a hint. */
        char long_name[80];
        memset(long_name, 'a', 64);
        long_name[64] = '\0';
        CHECK_FAILS(nnp_model_find(long_name, found, sizeof found), NNP_ERR_INVALID_ARGUMENT, "too long for a model name");
        char cwd[4096];
        CHECK(getcwd(cwd, sizeof cwd) != NULL);
        CHECK(chdir(dir) == 0);
        CHECK(rename("tiny.nnpm", "plainfile") == 0);
        CHECK_FAILS(nnp_model_load("plainfile", &m), NNP_ERR_IO, "write ./plainfile to read it");
        CHECK_OK(nnp_model_load("./plainfile", &m));
        nnp_model_free(m);
        m = NULL;
        CHECK(chdir(cwd) == 0);
        unsetenv("NNP_MODEL_PATH");
    }

    printf("messages are per thread:\n");
    nnp_model_load("/nonexistent/main.info", &m);
    pthread_t t;
    pthread_create(&t, NULL, other_thread, NULL);
    pthread_join(t, NULL);
    CHECK(strstr(nnp_last_error(), "main.info") != NULL);
    printf("  ok: '%s'\n", nnp_last_error());
    CHECK(strcmp(nnp_version(), "0.1.0") == 0);

    nnp_plan_free(plan);
    nnp_model_free(ok_model);
    return test_finish("test_errors");
}
