/* NNPForce on the CUDA platform: the shared test body, with float32 tolerances (mixed precision). */
#include "TestNNPForce.h"

const char* platformName = "CUDA";
double energyTolerance = 1e-5; /* relative, float32 arithmetic */
double forceTolerance = 1e-3;  /* relative RMS */
std::map<string, string> platformProperties = {{"Precision", "mixed"}}; /* double energy sums */
