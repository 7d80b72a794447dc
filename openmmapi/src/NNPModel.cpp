#include "internal/NNPModel.h"
#include "openmm/OpenMMException.h"

using namespace NNPPlugin;
using OpenMM::OpenMMException;

void NNPPlugin::checkNNP(nnp_status status, const std::string& what) {
    if (status != NNP_OK)
        throw OpenMMException("NNPForce: " + what + ": " + nnp_last_error());
}

NNPModel::NNPModel(nnp_model* model, const std::string& path) : model(model), path(path) {
    void* buffer = nullptr;
    size_t size = 0;
    nnp_status status = nnp_model_save_buffer(model, &buffer, &size);
    if (status != NNP_OK) {
        nnp_model_free(model);
        checkNNP(status, "cannot serialize model '" + path + "'");
    }
    data.assign(static_cast<const char*>(buffer), size);
    nnp_free(buffer);
}

NNPModel::~NNPModel() { nnp_model_free(model); }

NNPModel* NNPModel::load(const std::string& path) {
    nnp_model* model = nullptr;
    checkNNP(nnp_model_load(path.c_str(), &model), "cannot load model '" + path + "'");
    return new NNPModel(model, path);
}

NNPModel* NNPModel::fromData(const std::string& data, const std::string& path) {
    nnp_model* model = nullptr;
    checkNNP(nnp_model_load_buffer(data.data(), data.size(), &model), "cannot read embedded model (from '" + path + "')");
    return new NNPModel(model, path);
}
