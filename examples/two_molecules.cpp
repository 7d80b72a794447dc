// Example (C++): two drug-like molecules as two batches of one NNPForce, a few MD steps, and the
// energy of each molecule, with the plugin's Langevin integrator (whole steps from CUDA graphs on the
// CUDA platform).   two_molecules MODEL MOLECULE1.xyz MOLECULE2.xyz
// MODEL: a model name (ani1x, ani1ccx, ani2x) or a path to a .info / .nnpm file.
#include "NNPForce.h"
#include "NNPIntegrators.h"
#include "OpenMM.h"

#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <string>
#include <vector>

using namespace OpenMM;

int main(int argc, char** argv) {
    if (argc != 4) {
        std::cerr << "usage: two_molecules MODEL MOLECULE1.xyz MOLECULE2.xyz" << std::endl;
        return 2;
    }
    try {
        Platform::loadPluginsFromDirectory(Platform::getDefaultPluginsDirectory());
        const std::map<std::string, std::pair<int, double>> elements = {
            {"H", {1, 1.008}}, {"C", {6, 12.011}}, {"N", {7, 14.007}}, {"O", {8, 15.999}},
            {"F", {9, 18.998}}, {"S", {16, 32.06}}, {"Cl", {17, 35.45}}};
        System system;
        auto* force = new NNPPlugin::NNPForce(argv[1]); // the System takes ownership below
        std::vector<Vec3> positions;
        for (int batch = 0; batch < 2; batch++) {
            std::ifstream xyz(argv[2 + batch]);
            int n;
            std::string line, symbol;
            xyz >> n;
            std::getline(xyz, line);
            std::getline(xyz, line);
            for (int i = 0; i < n; i++) {
                double x, y, z;
                xyz >> symbol >> x >> y >> z;
                auto element = elements.at(symbol);
                int particle = system.addParticle(element.second);
                force->addAtom(particle, element.first, batch);
                positions.push_back(Vec3(x, y, z) * 0.1 + Vec3(batch * 2.0, 0, 0)); // Å → nm
            }
        }
        system.addForce(force);
        NNPPlugin::NNPLangevinIntegrator integrator(300, 1.0, 0.0005);
        Context context(system, integrator, Platform::getPlatformByName("CPU"));
        context.setPositions(positions);
        integrator.step(10);
        std::vector<double> energies = force->getBatchEnergies(context);
        for (size_t b = 0; b < energies.size(); b++)
            std::cout << std::fixed << std::setprecision(4) << "molecule " << b << ": " << energies[b] << " kJ/mol" << std::endl;
        std::cout << "total: " << context.getState(State::Energy).getPotentialEnergy() << " kJ/mol" << std::endl;
    } catch (const std::exception& e) {
        std::cerr << "error: " << e.what() << std::endl;
        return 1;
    }
    return 0;
}
