/*
 * Shared by the CUDA benchmarks: the drug-like molecules, a System of them (one batch each, NNPForce
 * with ANI-2x), OpenMM's CudaContext of a Context, and a clock.
 */
#ifndef NNP_BENCH_COMMON_H_
#define NNP_BENCH_COMMON_H_

#include "NNPForce.h"
#include "nnp.h"
#include "openmm/Context.h"
#include "openmm/Platform.h"
#include "openmm/State.h"
#include "openmm/System.h"
#include "openmm/VerletIntegrator.h"
#include "openmm/common/ContextSelector.h"
#include "openmm/cuda/CudaContext.h"
#include "openmm/cuda/CudaPlatform.h"
#include "openmm/cuda/CudaQueue.h"
#include "openmm/internal/ContextImpl.h"

#include <cstring>
#include <cuda_runtime_api.h>
#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

using namespace OpenMM;
using namespace NNPPlugin;
using std::string;
using std::vector;

struct Mol {
    vector<int> z;
    vector<Vec3> pos; // nm
    double box = 0;   // nm: the side of a cubic periodic box (Lattice="L 0 0 0 L 0 0 0 L"), or 0
};

static Mol readXyz(const string& path) {
    std::ifstream in(path);
    int n;
    string line, symbol;
    in >> n;
    std::getline(in, line);
    std::getline(in, line);
    Mol m;
    const size_t lattice = line.find("Lattice=\"");
    if (lattice != string::npos) m.box = atof(line.c_str() + lattice + 9) * 0.1;
    for (int i = 0; i < n; i++) {
        double x, y, z;
        in >> symbol >> x >> y >> z;
        m.z.push_back(symbol == "H" ? 1 : symbol == "C" ? 6 : symbol == "N" ? 7 : symbol == "O" ? 8 : symbol == "F" ? 9 : symbol == "S" ? 16 : 17);
        if (!in) {
            std::cerr << path << ": cannot read atom " << i + 1 << std::endl;
            exit(2);
        }
        m.pos.push_back(Vec3(x, y, z) * 0.1);
    }
    return m;
}

static CudaContext& cudaContextOf(Context& context) {
    ContextImpl* impl = *reinterpret_cast<ContextImpl**>(&context);
    return *static_cast<CudaPlatform::PlatformData*>(impl->getPlatformData())->contexts[0];
}

static double seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/* The 22-atom molecule for one, else the first `count` drug-like molecules in name order. */
static vector<string> chooseMolecules(const string& shared, int count) {
    if (count == 1) return {shared + "/molecules/druglike/drugbank-0030.xyz"};
    vector<string> files;
    DIR* dir = opendir((shared + "/molecules/druglike").c_str());
    for (dirent* e; dir && (e = readdir(dir));)
        if (string(e->d_name).find(".xyz") != string::npos) files.push_back(shared + "/molecules/druglike/" + e->d_name);
    if (dir) closedir(dir);
    std::sort(files.begin(), files.end());
    files.resize(std::min<size_t>(count, files.size()));
    return files;
}

/* Adds the molecules to the System, `copies` times each, one batch each, 3 nm apart on a grid;
   returns the positions. A single batch read with a Lattice is periodic in that box. */
static vector<Vec3> addMolecules(System& system, NNPForce* force, const vector<string>& chosen, vector<int>* zs = nullptr,
                                 vector<int>* batches = nullptr, int copies = 1) {
    vector<Vec3> positions;
    for (size_t k = 0; k < chosen.size() * copies; k++) {
        Mol m = readXyz(chosen[k % chosen.size()]);
        if (m.box > 0 && chosen.size() * copies == 1) {
            system.setDefaultPeriodicBoxVectors(Vec3(m.box, 0, 0), Vec3(0, m.box, 0), Vec3(0, 0, m.box));
            force->setUsesPeriodicBoundaryConditions(true);
        }
        for (size_t i = 0; i < m.z.size(); i++) {
            int p = system.addParticle(m.z[i] == 1 ? 1.008 : m.z[i] == 8 ? 15.999 : 12.0);
            force->addAtom(p, m.z[i], k);
            positions.push_back(m.pos[i] + Vec3(3.0 * (k % 10), 3.0 * (k / 10 % 10), 3.0 * (k / 100)));
            if (zs) zs->push_back(m.z[i]);
            if (batches) batches->push_back(k);
        }
    }
    system.addForce(force);
    return positions;
}

/* What both benchmarks start from: SHARED_DIR and sizes from the command line (default 1, 10, 100
   and all molecules), the ANI-2x model (or --model=PATH), OpenMM's plugins and the CUDA platform, the GPU's name. */
struct Bench {
    string shared, model, gpu;
    vector<int> sizes;     /* the whole numbers among the sizes */
    vector<string> tokens; /* all sizes: N (molecules), PATH.xyz (one batch), K*PATH.xyz (K copies) */
    Platform* platform = nullptr;
};

/* A size: N drug-like molecules (chooseMolecules), PATH.xyz (its atoms, one batch) or K*PATH.xyz (K
   copies, one batch each); `copies` is set to K (or 1). */
static vector<string> moleculesOf(const string& shared, const string& token, int* copies) {
    *copies = 1;
    if (token.find(".xyz") == string::npos) return chooseMolecules(shared, atoi(token.c_str()));
    const size_t star = token.find('*');
    if (star == string::npos) return {token};
    *copies = atoi(token.c_str());
    return {token.substr(star + 1)};
}

static bool benchSetup(int argc, char** argv, const char* program, Bench& b) {
    if (argc < 2) {
        std::cerr << "usage: " << program << " SHARED_DIR [--model=PATH] [sizes...]" << std::endl;
        return false;
    }
    b.shared = argv[1];
    b.model = b.shared + "/models/ani-model-zoo/ani-2x_8x.info";
    for (int i = 2; i < argc; i++) {
        if (strncmp(argv[i], "--model=", 8) == 0) b.model = argv[i] + 8;
        else {
            b.tokens.push_back(argv[i]);
            if (strchr(argv[i], '.') == NULL) b.sizes.push_back(atoi(argv[i]));
        }
    }
    if (b.tokens.empty()) {
        b.sizes = {1, 10, 100, (int)chooseMolecules(b.shared, 1 << 30).size()};
        for (int n : b.sizes) b.tokens.push_back(std::to_string(n));
    }
    Platform::loadPluginsFromDirectory(Platform::getDefaultPluginsDirectory());
    NNPForce::getPluginLoadFailures();
    b.platform = &Platform::getPlatformByName("CUDA");
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    b.gpu = prop.name;
    return true;
}

#endif
