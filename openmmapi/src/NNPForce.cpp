#include "NNPForce.h"
#include "internal/NNPForceImpl.h"
#include "internal/NNPModel.h"
#include "openmm/OpenMMException.h"

#include <algorithm>
#include <memory>
#include <sstream>

using namespace NNPPlugin;
using namespace OpenMM;
using std::string;
using std::vector;

NNPForce::NNPForce(const string& modelPath) : NNPForce(std::shared_ptr<const NNPModel>(NNPModel::load(modelPath))) {}

NNPForce::NNPForce(std::shared_ptr<const NNPModel> model) : model(model), member(-1), periodic(false), embedModel(true) {
    setName("NNPForce");
}

NNPForce* NNPForce::createFromModelData(const string& modelData, const string& modelPath) {
    return new NNPForce(std::shared_ptr<const NNPModel>(NNPModel::fromData(modelData, modelPath)));
}

NNPForce::~NNPForce() = default;

const string& NNPForce::getModelPath() const { return model->getPath(); }
string NNPForce::getModelName() const { return nnp_model_name(model->get()); }
const string& NNPForce::getModelData() const { return model->getData(); }
int NNPForce::getNumEnsembleMembers() const { return nnp_model_num_members(model->get()); }
double NNPForce::getCutoff() const { return nnp_model_cutoff(model->get()) / 10.0; }

vector<int> NNPForce::getSupportedElements() const {
    vector<int> elements;
    for (int i = 0; i < nnp_model_num_elements(model->get()); i++) elements.push_back(nnp_model_element(model->get(), i));
    return elements;
}

void NNPForce::checkElement(int atomicNumber) const {
    vector<int> supported = getSupportedElements();
    if (std::find(supported.begin(), supported.end(), atomicNumber) != supported.end()) return;
    const char* symbol = nnp_element_symbol(atomicNumber);
    std::stringstream message;
    message << "NNPForce: element " << (symbol ? symbol : "?") << " (atomic number " << atomicNumber
            << ") is not covered by model '" << getModelName() << "', which supports";
    for (int z : supported) message << " " << nnp_element_symbol(z);
    throw OpenMMException(message.str());
}

int NNPForce::getNumAtoms() const { return atoms.size(); }

int NNPForce::addAtom(int particle, int atomicNumber, int batch) {
    if (particle < 0) throw OpenMMException("NNPForce: particle index " + std::to_string(particle) + " is negative");
    checkBatch(particle, batch);
    checkElement(atomicNumber);
    atoms.push_back({particle, atomicNumber, batch});
    return atoms.size() - 1;
}

void NNPForce::checkBatch(int particle, int batch) {
    if (batch < 0) throw OpenMMException("NNPForce: batch index " + std::to_string(batch) + " of particle " + std::to_string(particle) + " is negative");
    if (batch >= NNP_MAX_BATCHES)
        throw OpenMMException("NNPForce: batch index " + std::to_string(batch) + " of particle " + std::to_string(particle) +
                              " is too large (at most " + std::to_string(NNP_MAX_BATCHES - 1) + ")");
}

int NNPForce::addAtoms(const vector<int>& particles, const vector<int>& atomicNumbers, const vector<int>& batches) {
    if (particles.size() != atomicNumbers.size() || particles.size() != batches.size())
        throw OpenMMException("NNPForce::addAtoms: " + std::to_string(particles.size()) + " particles, " +
                              std::to_string(atomicNumbers.size()) + " atomic numbers and " + std::to_string(batches.size()) +
                              " batches: the lengths must be equal");
    vector<int> supported = getSupportedElements();
    for (size_t i = 0; i < particles.size(); i++) {
        if (particles[i] < 0) throw OpenMMException("NNPForce: particle index " + std::to_string(particles[i]) + " is negative");
        checkBatch(particles[i], batches[i]);
        if (std::find(supported.begin(), supported.end(), atomicNumbers[i]) == supported.end()) checkElement(atomicNumbers[i]);
    }
    int first = atoms.size();
    atoms.reserve(atoms.size() + particles.size());
    for (size_t i = 0; i < particles.size(); i++) atoms.push_back({particles[i], atomicNumbers[i], batches[i]});
    return first;
}

void NNPForce::checkIndex(int index) const {
    if (index < 0 || index >= (int)atoms.size())
        throw OpenMMException("NNPForce: atom index " + std::to_string(index) + " is out of range (the force has " +
                              std::to_string(atoms.size()) + " atoms)");
}

void NNPForce::getAtomParameters(int index, int& particle, int& atomicNumber, int& batch) const {
    checkIndex(index);
    particle = atoms[index].particle;
    atomicNumber = atoms[index].atomicNumber;
    batch = atoms[index].batch;
}

void NNPForce::setAtomParameters(int index, int particle, int atomicNumber, int batch) {
    checkIndex(index);
    if (particle < 0) throw OpenMMException("NNPForce: particle index " + std::to_string(particle) + " is negative");
    checkBatch(particle, batch);
    checkElement(atomicNumber);
    atoms[index] = {particle, atomicNumber, batch};
}

int NNPForce::getNumBatches() const {
    int maxBatch = -1;
    for (const Atom& atom : atoms) maxBatch = std::max(maxBatch, atom.batch);
    return maxBatch + 1;
}

void NNPForce::setEnsembleMember(int m) {
    if (m < -1 || m >= getNumEnsembleMembers())
        throw OpenMMException("NNPForce: ensemble member " + std::to_string(m) + " is not valid: use -1 (mean) or 0.." +
                              std::to_string(getNumEnsembleMembers() - 1));
    member = m;
}

int NNPForce::getEnsembleMember() const { return member; }

void NNPForce::setBatchCharge(int batch, int charge) {
    if (batch < 0 || batch >= NNP_MAX_BATCHES)
        throw OpenMMException("NNPForce: setBatchCharge: batch " + std::to_string(batch) + " is not in 0.." +
                              std::to_string(NNP_MAX_BATCHES - 1));
    if (charge < -1000 || charge > 1000)
        throw OpenMMException("NNPForce: setBatchCharge: total charge " + std::to_string(charge) + " of batch " +
                              std::to_string(batch) + " is not in -1000..1000");
    if (charge != 0 && nnp_model_family(model->get()) == NNP_FAMILY_ANI)
        throw OpenMMException("NNPForce: setBatchCharge: the ANI model " + getModelName() +
                              " describes neutral molecules only; batch " + std::to_string(batch) +
                              " cannot have total charge " + std::to_string(charge) +
                              " (a TensorNet model such as AceFF takes one)");
    if (charge == 0)
        batchCharges.erase(batch);
    else
        batchCharges[batch] = charge;
}

int NNPForce::getBatchCharge(int batch) const {
    auto it = batchCharges.find(batch);
    return it == batchCharges.end() ? 0 : it->second;
}

std::string NNPForce::getModelFamily() const { return nnp_model_family_name(model->get()); }
void NNPForce::setUsesPeriodicBoundaryConditions(bool p) { periodic = p; }
bool NNPForce::usesPeriodicBoundaryConditions() const { return periodic; }
void NNPForce::setEmbedModelInXml(bool embed) { embedModel = embed; }
bool NNPForce::getEmbedModelInXml() const { return embedModel; }

vector<double> NNPForce::getBatchEnergies(Context& context) const {
    return dynamic_cast<NNPForceImpl&>(getImplInContext(context)).getBatchEnergies(getContextImpl(context));
}

void NNPForce::updateParametersInContext(Context& context) {
    dynamic_cast<NNPForceImpl&>(getImplInContext(context)).updateParametersInContext(getContextImpl(context));
}

string NNPForce::findModel(const string& nameOrPath) {
    vector<char> path(8192);
    checkNNP(nnp_model_find(nameOrPath.c_str(), path.data(), path.size()), "cannot find model '" + nameOrPath + "'");
    return string(path.data());
}

vector<string> NNPForce::getModelSearchPath() {
    vector<char> text(65536);
    checkNNP(nnp_model_search_path(text.data(), text.size()), "cannot list the model search path");
    vector<string> folders;
    std::istringstream lines(text.data());
    for (string line; std::getline(lines, line);)
        if (!line.empty()) folders.push_back(line);
    return folders;
}

void NNPForce::convertModel(const string& source, const string& destination) {
    std::unique_ptr<NNPModel> model(NNPModel::load(source));
    checkNNP(nnp_model_save(model->get(), destination.c_str()), "cannot write model '" + destination + "'");
}

vector<string> NNPForce::getPluginLoadFailures() {
    NNPForceImpl::loadPlatformPlugins();
    return NNPForceImpl::pluginLoadFailures();
}

ForceImpl* NNPForce::createImpl() const {
    NNPForceImpl::loadPlatformPlugins();
    return new NNPForceImpl(*this);
}
