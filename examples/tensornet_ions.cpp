// Example (C++): a TensorNet model (torchmd-net, e.g. Acellera's AceFF) on two ions of opposite
// charge as two batches of one NNPForce: batch charges, per-batch energies, a few MD steps, and the
// System written to XML and read back.   tensornet_ions MODEL [SYSTEM.xml]
// MODEL: a converted TensorNet model (.nnpm path or name; convert a .ckpt once with
// `python -m openmmnnp.models convert MODEL.ckpt MODEL.nnpm`). SYSTEM.xml: where to write the System.
#include "NNPForce.h"
#include "NNPIntegrators.h"
#include "OpenMM.h"

#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

using namespace OpenMM;

struct Ion {
    std::vector<int> elements;
    std::vector<Vec3> positions; // Å
    int charge;
};

int main(int argc, char** argv) {
    if (argc < 2 || argc > 3) {
        std::cerr << "usage: tensornet_ions MODEL [SYSTEM.xml]" << std::endl;
        return 2;
    }
    try {
        Platform::loadPluginsFromDirectory(Platform::getDefaultPluginsDirectory());
        const std::vector<Ion> ions = {
            {{6, 7, 1, 1, 1, 1, 1, 1}, // methylammonium, +1
             {{0, 0, 0}, {1.49, 0, 0}, {-0.37, 1.03, 0}, {-0.37, -0.51, 0.89}, {-0.37, -0.51, -0.89},
              {1.85, -0.95, 0}, {1.85, 0.47, 0.83}, {1.85, 0.47, -0.83}},
             +1},
            {{6, 8, 8, 1}, {{0, 0, 0}, {1.25, 0, 0}, {-0.62, 1.08, 0}, {-0.6, -0.95, 0}}, -1}}; // formate, -1
        const double mass[] = {0, 1.008, 0, 0, 0, 0, 12.011, 14.007, 15.999};
        System system;
        auto* force = new NNPPlugin::NNPForce(argv[1]); // the System takes ownership below
        if (force->getModelFamily() != "tensornet")
            std::cerr << "note: " << argv[1] << " is an " << force->getModelFamily() << " model, which refuses charges" << std::endl;
        std::vector<Vec3> positions;
        for (int batch = 0; batch < (int)ions.size(); batch++) {
            for (size_t i = 0; i < ions[batch].elements.size(); i++) {
                const int z = ions[batch].elements[i];
                force->addAtom(system.addParticle(mass[z]), z, batch);
                positions.push_back(ions[batch].positions[i] * 0.1 + Vec3(0.6 * batch, 0, 0)); // Å → nm
            }
            force->setBatchCharge(batch, ions[batch].charge);
        }
        system.addForce(force);
        NNPPlugin::NNPVerletIntegrator integrator(0.0005);
        Context context(system, integrator, Platform::getPlatformByName("CPU"));
        context.setPositions(positions);
        std::vector<double> energies = force->getBatchEnergies(context);
        for (size_t b = 0; b < energies.size(); b++)
            std::cout << "batch " << b << " (charge " << std::showpos << force->getBatchCharge(b) << std::noshowpos
                      << "): " << energies[b] << " kJ/mol" << std::endl;
        integrator.step(10);
        State state = context.getState(State::Positions | State::Energy);
        std::cout << "after 10 steps: " << state.getPotentialEnergy() << " kJ/mol" << std::endl;

        // The System in XML (the model embedded by default, so the file stands alone), and back.
        std::stringstream xml;
        XmlSerializer::serialize<System>(&system, "System", xml);
        if (argc == 3) {
            std::ofstream(argv[2]) << xml.str();
            std::cout << "wrote " << argv[2] << std::endl;
        }
        System* again = XmlSerializer::deserialize<System>(xml);
        const auto& copy = dynamic_cast<const NNPPlugin::NNPForce&>(again->getForce(0));
        VerletIntegrator plain(0.0005);
        Context context2(*again, plain, Platform::getPlatformByName("CPU"));
        context2.setPositions(state.getPositions());
        const double e1 = state.getPotentialEnergy(), e2 = context2.getState(State::Energy).getPotentialEnergy();
        const bool same = copy.getBatchCharge(0) == ions[0].charge && copy.getBatchCharge(1) == ions[1].charge &&
                          std::fabs(e1 - e2) <= 1e-9 * std::fabs(e1);
        std::cout << "XML round trip: " << (same ? "same charges and energy" : "DIFFERENT") << std::endl;
        delete again;
        return same ? 0 : 1;
    } catch (const std::exception& e) {
        std::cerr << "error: " << e.what() << std::endl;
        return 1;
    }
}
