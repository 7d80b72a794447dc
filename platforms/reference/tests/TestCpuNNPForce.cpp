/* NNPForce on the CPU platform: the shared test body. The CPU platform runs ANI's networks in float32
   (AEV, energies and forces in float64): energies within 1e-8 relative, forces 1e-5. */
#include "TestNNPForce.h"

const char* platformName = "CPU";
double energyTolerance = 1e-8;
double forceTolerance = 1e-5;
std::map<string, string> platformProperties;
