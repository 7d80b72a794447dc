/*
 * Helpers shared by the plugin's C++ test bodies (TestNNPForce.h, TestNNPIntegrators.h): paths of the
 * shared models and molecules, a Context on the platform under test, XYZ molecules and a System of
 * them, and an expected-error check.
 */
#ifndef NNP_TEST_HELPERS_H_
#define NNP_TEST_HELPERS_H_

#include "NNPForce.h"
#include "openmm/Context.h"
#include "openmm/HarmonicBondForce.h"
#include "openmm/OpenMMException.h"
#include "openmm/Platform.h"
#include "openmm/State.h"
#include "openmm/System.h"
#include "openmm/VerletIntegrator.h"
#include "openmm/internal/AssertionUtilities.h"
#include "openmm/serialization/XmlSerializer.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace NNPPlugin;
using namespace OpenMM;
using std::string;
using std::vector;

extern const char* platformName;   // set by the platform's test file
extern std::map<string, string> platformProperties;

static const double HARTREE = 2625.4996387552483; // kJ/mol

static string sharedPath(const string& rel) {
    const char* root = getenv("NNP_SHARED_DIR");
    return string(root && root[0] ? root : NNP_SHARED_DIR_DEFAULT) + "/" + rel;
}

static string ani1x() { return sharedPath("models/ani-model-zoo/ani-1x_8x.info"); }
static string ani2x() { return sharedPath("models/ani-model-zoo/ani-2x_8x.info"); }
static bool exists(const string& path) { return std::ifstream(path).good(); }
/* The smaller model where present (ANI-1x), else ANI-2x (the GPU machine carries only ANI-2x). */
static string smallModel() { return exists(ani1x()) ? ani1x() : ani2x(); }

static Context* makeContext(System& system, Integrator& integrator) {
    return new Context(system, integrator, Platform::getPlatformByName(platformName), platformProperties);
}

struct Molecule {
    vector<int> z;
    vector<Vec3> pos; // nm
};

static Molecule readXyz(const string& rel) {
    std::ifstream in(sharedPath(rel));
    if (!in) throw OpenMMException("cannot read " + sharedPath(rel));
    int n;
    string line, symbol;
    in >> n;
    std::getline(in, line);
    std::getline(in, line);
    Molecule m;
    for (int i = 0; i < n; i++) {
        double x, y, zc;
        in >> symbol >> x >> y >> zc;
        int z = symbol == "H" ? 1 : symbol == "C" ? 6 : symbol == "N" ? 7 : symbol == "O" ? 8 : symbol == "F" ? 9 :
                symbol == "S" ? 16 : symbol == "Cl" ? 17 : -1;
        m.z.push_back(z);
        m.pos.push_back(Vec3(x, y, zc) * 0.1);
    }
    return m;
}

static const char* const drugs[] = {"molecules/druglike/drugbank-0001.xyz", "molecules/druglike/drugbank-0030.xyz",
                                    "molecules/druglike/drugbank-0147.xyz"};

/* A System of the given molecules, one batch each (batch k = firstBatch + k·stride). */
static NNPForce* buildSystem(System& system, vector<Vec3>& positions, const vector<Molecule>& mols, const string& model,
                             int stride = 1) {
    NNPForce* force = new NNPForce(model);
    for (size_t k = 0; k < mols.size(); k++)
        for (size_t i = 0; i < mols[k].z.size(); i++) {
            int p = system.addParticle(mols[k].z[i] == 1 ? 1.008 : 12.0);
            force->addAtom(p, mols[k].z[i], k * stride);
            positions.push_back(mols[k].pos[i]);
        }
    system.addForce(force);
    return force;
}

template <class F>
static void expectError(const string& needle, F body, const string& alternative = "") {
    try {
        body();
    } catch (const OpenMMException& e) {
        if (string(e.what()).find(needle) == string::npos &&
            (alternative.empty() || string(e.what()).find(alternative) == string::npos))
            throw OpenMMException("error message '" + string(e.what()) + "' lacks '" + needle + "'");
        std::cout << "  ok: " << e.what() << std::endl;
        return;
    }
    throw OpenMMException("expected an OpenMMException containing '" + needle + "'");
}

/* A DeviceIndex list of two CUDA devices that a Context can be created on: "0,1", else "0,0" (two
   CUDA contexts on one GPU); "" where neither can (each refusal printed). */
static string twoCudaDevices() {
    System system;
    system.addParticle(1.0);
    VerletIntegrator integrator(0.001);
    for (const char* list : {"0,1", "0,0"}) {
        try {
            Context c(system, integrator, Platform::getPlatformByName("CUDA"), {{"DeviceIndex", list}});
            return list;
        } catch (const OpenMMException& e) {
            std::cout << "DeviceIndex " << list << ": " << e.what() << std::endl;
        }
    }
    return "";
}

/* Loads OpenMM's plugins and this plugin's platform libraries; false (after saying why) when the
   platform under test or its `kernel` is missing here: the test then exits with 77 (skipped). */
static bool platformAvailable(const string& kernel) {
    Platform::loadPluginsFromDirectory(OPENMM_PLUGIN_DIR);
    NNPForce::getPluginLoadFailures(); // loads this plugin's platform libraries
    bool found = false;
    for (int i = 0; i < Platform::getNumPlatforms(); i++) found |= Platform::getPlatform(i).getName() == platformName;
    if (found && Platform::getPlatformByName(platformName).supportsKernels({kernel})) return true;
    std::cout << "skipped: the " << platformName << " platform is not available here (or has no " << kernel << " kernel)";
    for (const string& f : Platform::getPluginLoadFailures()) std::cout << "\n  " << f;
    for (const string& f : NNPForce::getPluginLoadFailures()) std::cout << "\n  " << f;
    std::cout << std::endl;
    return false;
}

#endif
