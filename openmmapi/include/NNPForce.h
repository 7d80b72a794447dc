#ifndef OPENMM_NNPFORCE_H_
#define OPENMM_NNPFORCE_H_

#include "internal/windowsExportNNP.h"
#include "openmm/Context.h"
#include "openmm/Force.h"

#include <memory>
#include <string>
#include <map>
#include <vector>

namespace NNPPlugin {

class NNPModel;

/**
 * A neural-network potential of the ANI family (ANI-1x, ANI-1ccx, ANI-2x) for many independent
 * molecules at once.
 *
 * Every atom of the force is an OpenMM particle with an element (atomic number) and a batch index
 * (its molecule or replica, ≥ 0). Atoms of different batches never interact; particles that are not
 * added to the force get nothing from it, so classical forces can handle them. The energy of each
 * batch is available from getBatchEnergies(); the force adds the total energy and the forces.
 *
 * The model is read once, when the force is created: the NeuroChem layout of the ANI model zoo
 * (its `<name>.info` file) or the project's single-file `.nnpm` format. XML serialization embeds
 * the model by default, so a serialized System is self-contained.
 */
class OPENMM_EXPORT_NNP NNPForce : public OpenMM::Force {
public:
    /**
     * Creates a force that evaluates the given model.
     *
     * @param modelPath  a model name ("ani2x", "ani1x", "ani1ccx": see findModel()), or the path of
     *                   a NeuroChem `.info` file or an `.nnpm` file
     * @throws OpenMMException if the name cannot be resolved, or the model cannot be read or is corrupt
     */
    explicit NNPForce(const std::string& modelPath);
    /** Creates a force from a model held in memory in the `.nnpm` format (used by deserialization). */
    static NNPForce* createFromModelData(const std::string& modelData, const std::string& modelPath);
    ~NNPForce();

    /** The name or path the model was read from, as given to the constructor. */
    const std::string& getModelPath() const;
    /** The model's name (for example "ani-2x_8x"). */
    std::string getModelName() const;
    /** The model in the `.nnpm` format (what serialization embeds). */
    const std::string& getModelData() const;
    /** Number of ensemble members of the model. */
    int getNumEnsembleMembers() const;
    /** Atomic numbers of the elements the model covers. */
    std::vector<int> getSupportedElements() const;
    /** Interaction range of the model, in nm. */
    double getCutoff() const;

    int getNumAtoms() const;
    /**
     * Adds an atom.
     *
     * @param particle      index of the particle in the System
     * @param atomicNumber  its element; must be one the model covers
     * @param batch         its batch (molecule or replica), 0 .. NNP_MAX_BATCHES - 1 (2^26 - 1)
     * @return the index of the atom in this force
     */
    int addAtom(int particle, int atomicNumber, int batch);
    /**
     * Adds many atoms at once (the same as addAtom for each, in order, but all are checked before any
     * is added). The three vectors must have the same length.
     * @return the index in this force of the first atom added
     */
    int addAtoms(const std::vector<int>& particles, const std::vector<int>& atomicNumbers, const std::vector<int>& batches);
    void getAtomParameters(int index, int& particle, int& atomicNumber, int& batch) const;
    void setAtomParameters(int index, int particle, int atomicNumber, int batch);
    /** Number of batches: the largest batch index plus one (0 without atoms). */
    int getNumBatches() const;

    /**
     * The total charge of a batch in elementary charges (default 0), for models that take one
     * (TensorNet: the (1 + 0.1 q) factors of torchmd-net). ANI models refuse a non-zero charge.
     * A charge set for a batch that has no atoms has no effect.
     * @throws OpenMMException for a batch out of range, a charge outside -1000..1000, or a non-zero
     *         charge for a model family that does not take one
     */
    void setBatchCharge(int batch, int charge);
    int getBatchCharge(int batch) const;
    /** The batches with a non-zero total charge, and their charges (ascending batch). */
    const std::map<int, int>& getBatchCharges() const { return batchCharges; }
    /** The model family: "ani" or "tensornet". */
    std::string getModelFamily() const;

    /** Ensemble member to evaluate: -1 (default) for the ensemble mean, or 0 .. members-1. */
    void setEnsembleMember(int member);
    int getEnsembleMember() const;

    /**
     * Whether to apply periodic boundary conditions (minimum image with the Context's box; every
     * box width must be at least twice the cutoff). Default: false.
     */
    void setUsesPeriodicBoundaryConditions(bool periodic);
    bool usesPeriodicBoundaryConditions() const override;

    /** Whether XML serialization embeds the model (default true) or stores only its path. */
    void setEmbedModelInXml(bool embed);
    bool getEmbedModelInXml() const;

    /**
     * The energy of every batch at the Context's current positions, in kJ/mol (index = batch).
     * Batches without atoms have energy 0.
     */
    std::vector<double> getBatchEnergies(OpenMM::Context& context) const;

    /**
     * Copies the atoms (particles, elements, batches), the ensemble member and the periodicity to a
     * Context that already uses this force. The number of atoms and batches may change.
     */
    void updateParametersInContext(OpenMM::Context& context);

    /**
     * Failures while loading the plugin's platform libraries (for example a CUDA library that could
     * not be found). Empty when every platform library loaded.
     */
    static std::vector<std::string> getPluginLoadFailures();

    /**
     * Resolves a model name to the file it names; a path is returned unchanged. A name ("ani2x",
     * "ani1x", "ani1ccx", …: letters, digits, '-', '_', '.', not ending in .nnpm or .info) is looked
     * up as `<name>.nnpm` in the folders of getModelSearchPath(), first match wins.
     * @throws OpenMMException if the name is found nowhere (the message lists where it looked), or
     *         the match is not a readable file
     */
    static std::string findModel(const std::string& nameOrPath);
    /**
     * The folders searched for model names, in order: those of the environment variable
     * NNP_MODEL_PATH (':'-separated), the per-user cache ($XDG_CACHE_HOME/openmm-nnp/models or
     * ~/.cache/openmm-nnp/models), and share/openmm-nnp/models beside the plugin's library folder
     * (where the openmm-nnp-models wheel installs the ANI models).
     */
    static std::vector<std::string> getModelSearchPath();
    /**
     * Reads a model (name or path, NeuroChem or `.nnpm`) and writes it to `destination` in the
     * `.nnpm` format, creating or replacing that file.
     * @throws OpenMMException if the model cannot be read or the file cannot be written
     */
    static void convertModel(const std::string& source, const std::string& destination);

    /** The loaded model, shared with the platform kernels (internal; not part of the stable API). */
    const std::shared_ptr<const NNPModel>& getInternalModel() const { return model; }

protected:
    OpenMM::ForceImpl* createImpl() const override;

private:
    struct Atom {
        int particle, atomicNumber, batch;
    };
    explicit NNPForce(std::shared_ptr<const NNPModel> model);
    void checkElement(int atomicNumber) const;
    void checkIndex(int index) const;
    static void checkBatch(int particle, int batch);
    std::shared_ptr<const NNPModel> model;
    std::vector<Atom> atoms;
    std::map<int, int> batchCharges; // non-zero only
    int member;
    bool periodic, embedModel;
};

} // namespace NNPPlugin

#endif
