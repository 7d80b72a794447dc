#ifndef OPENMM_NNPINTEGRATORPROXIES_H_
#define OPENMM_NNPINTEGRATORPROXIES_H_

#include "internal/windowsExportNNP.h"
#include "openmm/serialization/SerializationProxy.h"

namespace NNPPlugin {

/**
 * XML serialization of NNPVerletIntegrator (version 1): step size, constraint tolerance,
 * integration force groups, steps per graph and whether graphs are used.
 */
class OPENMM_EXPORT_NNP NNPVerletIntegratorProxy : public OpenMM::SerializationProxy {
public:
    NNPVerletIntegratorProxy();
    void serialize(const void* object, OpenMM::SerializationNode& node) const override;
    void* deserialize(const OpenMM::SerializationNode& node) const override;
};

/** XML serialization of NNPLangevinIntegrator (version 1): the above plus temperature, friction and seed. */
class OPENMM_EXPORT_NNP NNPLangevinIntegratorProxy : public OpenMM::SerializationProxy {
public:
    NNPLangevinIntegratorProxy();
    void serialize(const void* object, OpenMM::SerializationNode& node) const override;
    void* deserialize(const OpenMM::SerializationNode& node) const override;
};

} // namespace NNPPlugin

#endif
