#ifndef OPENMM_NNPMODEL_H_
#define OPENMM_NNPMODEL_H_

#include "internal/windowsExportNNP.h"
#include "nnp.h"

#include <string>

namespace NNPPlugin {

/**
 * A libnnp model held by NNPForce and shared with the kernels (internal). Immutable once created.
 */
class OPENMM_EXPORT_NNP NNPModel {
public:
    /** Reads a model file (.info or .nnpm); throws OpenMMException with libnnp's message on failure. */
    static NNPModel* load(const std::string& path);
    /** Reads a model from `.nnpm` bytes. */
    static NNPModel* fromData(const std::string& data, const std::string& path);
    ~NNPModel();
    const nnp_model* get() const { return model; }
    const std::string& getPath() const { return path; }
    const std::string& getData() const { return data; }
private:
    NNPModel(nnp_model* model, const std::string& path);
    nnp_model* model;
    std::string path, data;
};

/** Throws an OpenMMException "NNPForce: <what>: <libnnp message>" unless status is NNP_OK. */
OPENMM_EXPORT_NNP void checkNNP(nnp_status status, const std::string& what);

} // namespace NNPPlugin

#endif
