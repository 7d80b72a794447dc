/* NNPVerletIntegrator and NNPLangevinIntegrator on the CPU platform (OpenMM's kernels, eagerly). */
#include "TestNNPIntegrators.h"

const char* platformName = "CPU";
std::map<string, string> platformProperties;
