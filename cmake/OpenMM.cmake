# Finds OpenMM: OPENMM_DIR (CMake or environment variable), else the openmm package of the Python
# given by Python3_EXECUTABLE (or found on PATH). Checks the version (>= 8.3) by running it.
enable_language(CXX)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)

if(NOT OPENMM_DIR AND DEFINED ENV{OPENMM_DIR})
  set(OPENMM_DIR "$ENV{OPENMM_DIR}")
endif()
find_package(Python3 COMPONENTS Interpreter)
if(NOT OPENMM_DIR AND Python3_Interpreter_FOUND)
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c "import os, openmm.version as v; print(os.path.dirname(v.openmm_library_path))"
    OUTPUT_VARIABLE _openmm_dir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _openmm_rc ERROR_QUIET)
  if(_openmm_rc EQUAL 0)
    set(OPENMM_DIR "${_openmm_dir}")
  endif()
endif()
if(NOT OPENMM_DIR OR NOT EXISTS "${OPENMM_DIR}/include/OpenMM.h")
  message(FATAL_ERROR "OpenMM not found. Set OPENMM_DIR to an OpenMM installation (the folder with include/ "
                      "and lib/), or Python3_EXECUTABLE to a Python that has the openmm package "
                      "(scripts/setup.sh makes one), or configure with -DNNP_BUILD_OPENMM=OFF.")
endif()
set(OPENMM_LIB_DIR "${OPENMM_DIR}/lib")
find_library(OPENMM_LIBRARY OpenMM PATHS "${OPENMM_LIB_DIR}" NO_DEFAULT_PATH REQUIRED)
add_library(OpenMM::OpenMM SHARED IMPORTED)
set_target_properties(OpenMM::OpenMM PROPERTIES IMPORTED_LOCATION "${OPENMM_LIBRARY}"
                      INTERFACE_INCLUDE_DIRECTORIES "${OPENMM_DIR}/include")

if(NOT OPENMM_VERSION_CHECKED STREQUAL "${OPENMM_LIBRARY}")
  file(WRITE "${CMAKE_BINARY_DIR}/openmm_version.cpp"
       "#include \"openmm/Platform.h\"\n#include <iostream>\nint main() { std::cout << OpenMM::Platform::getOpenMMVersion(); }\n")
  try_run(_run_rc _compile_ok "${CMAKE_BINARY_DIR}/openmm_version" "${CMAKE_BINARY_DIR}/openmm_version.cpp"
          CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${OPENMM_DIR}/include" "-DCMAKE_SKIP_RPATH=OFF"
          LINK_LIBRARIES "${OPENMM_LIBRARY}" "-Wl,-rpath,${OPENMM_LIB_DIR}"
          COMPILE_OUTPUT_VARIABLE _compile_out RUN_OUTPUT_VARIABLE OPENMM_VERSION)
  if(NOT _compile_ok OR NOT _run_rc EQUAL 0)
    message(FATAL_ERROR "Cannot build or run a program against OpenMM in ${OPENMM_DIR}:\n${_compile_out}")
  endif()
  if(OPENMM_VERSION VERSION_LESS 8.3)
    message(FATAL_ERROR "OpenMM ${OPENMM_VERSION} in ${OPENMM_DIR} is too old: openmm-nnp needs 8.3 or newer")
  endif()
  set(OPENMM_VERSION "${OPENMM_VERSION}" CACHE INTERNAL "")
  set(OPENMM_VERSION_CHECKED "${OPENMM_LIBRARY}" CACHE INTERNAL "")
endif()
message(STATUS "OpenMM ${OPENMM_VERSION} in ${OPENMM_DIR}")

# Install RPATHs by where a library lands: "lib" (OpenMM.libs/lib or lib/), "plugin" (…/lib/plugins),
# "cuda-plugin" (also NVIDIA's pip CUDA libraries, as openmm-cuda-13's own plugins do) or "python"
# (site-packages/openmmnnp). Relative in the wheel layout; a plain prefix also names OpenMM's folders.
function(nnp_install_rpath target where)
  if(where STREQUAL "lib")
    set(rp "\$ORIGIN")
  elseif(where STREQUAL "plugin")
    set(rp "\$ORIGIN" "\$ORIGIN/..")
  elseif(where STREQUAL "cuda-plugin")
    set(rp "\$ORIGIN" "\$ORIGIN/..")
    if(NNP_WHEEL_LAYOUT)
      list(APPEND rp "\$ORIGIN/../../../nvidia/cu13/lib")
    endif()
  elseif(where STREQUAL "python")
    set(rp "\$ORIGIN/../OpenMM.libs/lib")
  endif()
  if(NOT NNP_WHEEL_LAYOUT)
    list(APPEND rp "${OPENMM_LIB_DIR}" "${OPENMM_LIB_DIR}/plugins")
  endif()
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "${rp}")
endfunction()
