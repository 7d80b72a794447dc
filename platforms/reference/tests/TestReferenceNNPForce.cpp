/* NNPForce on the Reference platform: the shared test body with double-precision tolerances. */
#include "TestNNPForce.h"

const char* platformName = "Reference";
double energyTolerance = 1e-12;
double forceTolerance = 1e-10;
std::map<string, string> platformProperties;
