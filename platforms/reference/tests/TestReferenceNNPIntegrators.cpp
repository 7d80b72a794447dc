/* NNPVerletIntegrator and NNPLangevinIntegrator on the Reference platform (OpenMM's kernels, eagerly). */
#include "TestNNPIntegrators.h"

const char* platformName = "Reference";
std::map<string, string> platformProperties;
