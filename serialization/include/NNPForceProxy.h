#ifndef OPENMM_NNPFORCEPROXY_H_
#define OPENMM_NNPFORCEPROXY_H_

#include "internal/windowsExportNNP.h"
#include "openmm/serialization/SerializationProxy.h"

namespace NNPPlugin {

/**
 * XML serialization of NNPForce. Version 1 stores the force group, name, periodicity, ensemble
 * member, the model path and (by default) the model itself, base64-encoded `.nnpm` bytes, so that
 * the XML is self-contained; then every atom (particle, atomic number, batch).
 */
class OPENMM_EXPORT_NNP NNPForceProxy : public OpenMM::SerializationProxy {
public:
    NNPForceProxy();
    void serialize(const void* object, OpenMM::SerializationNode& node) const override;
    void* deserialize(const OpenMM::SerializationNode& node) const override;
};

} // namespace NNPPlugin

#endif
