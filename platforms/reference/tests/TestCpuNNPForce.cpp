/* NNPForce on the CPU platform: the shared test body with double-precision tolerances. */
#include "TestNNPForce.h"

const char* platformName = "CPU";
double energyTolerance = 1e-12;
double forceTolerance = 1e-10;
std::map<string, string> platformProperties;
