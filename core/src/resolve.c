/*
 * Model names: "ani2x", "ani1x", "ani1ccx" (or any other name of a model file) resolve to
 * "<name>.nnpm" in the first of these folders that holds one:
 *   1. each folder of NNP_MODEL_PATH (':'-separated), in order;
 *   2. the per-user cache: $XDG_CACHE_HOME/openmm-nnp/models, else ~/.cache/openmm-nnp/models;
 *   3. the models installed beside this library: <folder of libnnp>/../share/openmm-nnp/models
 *      (the openmm-nnp-models wheel, an install prefix, or a build tree).
 * Anything that is not a name is a path and is used as given.
 */
#define _GNU_SOURCE /* dladdr */
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NNP_MODEL_SUFFIX ".nnpm"
#define NNP_NAME_MAX 63

static int ends_with(const char* s, const char* suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Whether s is made of a name's characters and is not a file name (a name but for its length). */
static int name_shaped(const char* s) {
    if (s == NULL || s[0] == '\0' || s[0] == '.') return 0;
    for (const char* c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
              *c == '_' || *c == '.'))
            return 0;
    return !ends_with(s, NNP_MODEL_SUFFIX) && !ends_with(s, ".info");
}

static int is_name(const char* s) { return name_shaped(s) && strlen(s) <= NNP_NAME_MAX; }

/* A growing text for the list of places looked at. */
typedef struct text {
    char buf[4096];
    size_t len;
} text;

static void text_add(text* t, const char* fmt, const char* a, const char* b) {
    if (t->len >= sizeof t->buf - 1) return;
    int n = snprintf(t->buf + t->len, sizeof t->buf - t->len, fmt, a, b);
    if (n > 0) t->len += (size_t)n < sizeof t->buf - t->len ? (size_t)n : sizeof t->buf - 1 - t->len;
}

/* Folder 3: <folder of the library that holds this function>/../share/openmm-nnp/models. */
static int library_models_folder(char* out, size_t size) {
    Dl_info info;
    if (dladdr((void*)&nnp_model_find, &info) == 0 || info.dli_fname == NULL) return 0;
    char* library = realpath(info.dli_fname, NULL);
    if (library == NULL) return 0;
    char* slash = strrchr(library, '/');
    if (slash != NULL) *slash = '\0';              /* the library's folder */
    slash = strrchr(library, '/');
    int n = -1;
    if (slash != NULL) {
        *slash = '\0';                             /* its parent */
        n = snprintf(out, size, "%s/share/openmm-nnp/models", library);
    }
    free(library);
    return n > 0 && (size_t)n < size;
}

static int cache_folder(char* out, size_t size) {
    const char* xdg = getenv("XDG_CACHE_HOME");
    const char* home = getenv("HOME");
    int n;
    if (xdg != NULL && xdg[0] == '/')
        n = snprintf(out, size, "%s/openmm-nnp/models", xdg);
    else if (home != NULL && home[0] != '\0')
        n = snprintf(out, size, "%s/.cache/openmm-nnp/models", home);
    else
        return 0;
    return n > 0 && (size_t)n < size;
}

/* The folders searched for a name, in order: as many as NNP_MODEL_PATH names, then the two
   fixed ones. */
typedef struct folders {
    int count;
    char (*path)[4096];
} folders;

static void free_folders(folders* f) { free(f->path); }

static nnp_status search_folders(folders* f) {
    f->count = 0;
    const char* env = getenv("NNP_MODEL_PATH");
    size_t entries = 1;
    for (const char* c = env ? env : ""; *c; c++) entries += *c == ':';
    f->path = malloc((entries + 2) * sizeof *f->path);
    if (f->path == NULL) return nnp_fail(NNP_ERR_MEMORY, "out of memory for the model search path");
    if (env != NULL) {
        const char* start = env;
        for (int entry = 1;; entry++) {
            const char* end = strchr(start, ':');
            size_t len = end ? (size_t)(end - start) : strlen(start);
            if (len >= sizeof f->path[0]) {
                free_folders(f);
                return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "NNP_MODEL_PATH: entry %d is %zu characters long, longer "
                                "than a path may be (%zu)", entry, len, sizeof f->path[0] - 1);
            }
            if (len > 0) {
                memcpy(f->path[f->count], start, len);
                f->path[f->count++][len] = '\0';
            }
            if (end == NULL) break;
            start = end + 1;
        }
    }
    if (cache_folder(f->path[f->count], sizeof f->path[0])) f->count++;
    if (library_models_folder(f->path[f->count], sizeof f->path[0])) f->count++;
    return NNP_OK;
}

nnp_status nnp_model_search_path(char* out, size_t size) {
    if (out == NULL || size == 0) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_model_search_path: NULL argument");
    folders f_;
    folders* f = &f_;
    nnp_status st = search_folders(f);
    if (st != NNP_OK) return st;
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < f->count; i++) {
        size_t k = strlen(f->path[i]);
        if (len + k + 2 > size) {
            free_folders(f);
            return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_model_search_path: buffer too small");
        }
        memcpy(out + len, f->path[i], k);
        len += k;
        out[len++] = '\n';
        out[len] = '\0';
    }
    free_folders(f);
    return NNP_OK;
}

/* Looks for <folder>/<name>.nnpm. 1: found (path written), 0: absent, -1: failed (*status and the
   message set). */
static int look_in(const char* folder, const char* name, char* path, size_t size, text* looked, nnp_status* status) {
    char candidate[4200];
    int n = snprintf(candidate, sizeof candidate, "%s/%s" NNP_MODEL_SUFFIX, folder, name);
    if (n < 0 || (size_t)n >= sizeof candidate) return 0;
    struct stat st;
    if (stat(candidate, &st) != 0) {
        text_add(looked, "\n  %s (%s)", candidate, errno == ENOENT ? "absent" : strerror(errno));
        return 0;
    }
    if (!S_ISREG(st.st_mode)) {
        *status = nnp_fail(NNP_ERR_IO, "model '%s': %s is not a regular file", name, candidate);
        return -1;
    }
    if (access(candidate, R_OK) != 0) {
        *status = nnp_fail(NNP_ERR_IO, "model '%s': %s cannot be read (%s)", name, candidate, strerror(errno));
        return -1;
    }
    if ((size_t)n >= size) {
        *status = nnp_fail(NNP_ERR_INVALID_ARGUMENT, "model '%s': the path %s is longer than the buffer", name,
                           candidate);
        return -1;
    }
    memcpy(path, candidate, (size_t)n + 1);
    return 1;
}

nnp_status nnp_model_find(const char* name_or_path, char* path, size_t size) {
    if (name_or_path == NULL || path == NULL || size == 0)
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_model_find: NULL argument");
    if (name_shaped(name_or_path) && !is_name(name_or_path))
        return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "'%.100s...' (%zu characters) is too long for a model name (at "
                        "most %d); to read a file of that name, write ./%.100s...", name_or_path,
                        strlen(name_or_path), NNP_NAME_MAX, name_or_path);
    if (!is_name(name_or_path)) {
        size_t n = strlen(name_or_path);
        if (n >= size) return nnp_fail(NNP_ERR_INVALID_ARGUMENT, "nnp_model_find: path longer than the buffer");
        memcpy(path, name_or_path, n + 1);
        return NNP_OK;
    }
    const char* name = name_or_path;
    folders f_;
    folders* f = &f_;
    nnp_status found_st = search_folders(f);
    if (found_st != NNP_OK) return found_st;
    text looked = {{0}, 0};
    const char* env = getenv("NNP_MODEL_PATH");
    if (env == NULL || env[0] == '\0') text_add(&looked, "\n  NNP_MODEL_PATH%s%s (not set)", "", "");
    int found = 0;
    nnp_status status = NNP_OK;
    for (int i = 0; i < f->count && found == 0; i++) found = look_in(f->path[i], name, path, size, &looked, &status);
    free_folders(f);
    if (found < 0) return status;
    if (found) return NNP_OK;
    struct stat here;
    if (stat(name, &here) == 0) {
        char hint[256];
        snprintf(hint, sizeof hint, "\n'%s' is also a %s in the working folder: a model name is never read as a "
                 "path; write ./%s to read it", name, S_ISDIR(here.st_mode) ? "folder" : "file", name);
        text_add(&looked, "%s%s", hint, "");
    }
    return nnp_fail(NNP_ERR_IO,
                    "model '%s' not found. Looked for %s" NNP_MODEL_SUFFIX " in:%s\n"
                    "Install the ANI models with 'pip install openmm-nnp-models', or convert a copy of the ANI "
                    "model zoo into the per-user cache with 'python -m openmmnnp.models install ZOO_FOLDER', or "
                    "put %s" NNP_MODEL_SUFFIX " in a folder of NNP_MODEL_PATH, or pass the model file's path.",
                    name, name, looked.buf, name);
}
