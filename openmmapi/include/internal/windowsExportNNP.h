#ifndef OPENMM_WINDOWSEXPORTNNP_H_
#define OPENMM_WINDOWSEXPORTNNP_H_
/* Export macro of the NNP plugin's libraries. */
#if defined(_MSC_VER)
#if defined(OPENMM_NNP_BUILDING_SHARED_LIBRARY)
#define OPENMM_EXPORT_NNP __declspec(dllexport)
#else
#define OPENMM_EXPORT_NNP __declspec(dllimport)
#endif
#else
#define OPENMM_EXPORT_NNP __attribute__((visibility("default")))
#endif
#endif
