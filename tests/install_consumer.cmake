# `cmake --install` into a fresh prefix, then examples/ built on its own against it with
# find_package(pagedattn), with CUDAToolkit made unfindable (a consumer must not need it,
# whether or not the install has the CUDA backend), and the program run: it must pass.
# Run by ctest as: cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... [-DGENERATOR=...]
#   [-DCXX_COMPILER=...] -P install_consumer.cmake
foreach(v BUILD_DIR SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "install_consumer.cmake: -D${v}=... is required")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

run_step("install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
if(NOT EXISTS "${prefix}/lib/cmake/pagedattn/pagedattnConfig.cmake" AND
   NOT EXISTS "${prefix}/lib64/cmake/pagedattn/pagedattnConfig.cmake")
  message(FATAL_ERROR "no pagedattnConfig.cmake under ${prefix}")
endif()
set(generator)
if(GENERATOR)
  set(generator -G "${GENERATOR}")
endif()
run_step("configure the consumer" ${CMAKE_COMMAND} -S "${SOURCE_DIR}/examples"
         -B "${WORK_DIR}/consumer" ${generator} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
         -DCMAKE_PREFIX_PATH=${prefix}
         -DCMAKE_BUILD_TYPE=Release -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
run_step("build the consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/consumer")
find_program(engine_step pagedattn_engine_step PATHS "${WORK_DIR}/consumer" NO_DEFAULT_PATH)
if(NOT engine_step)
  message(FATAL_ERROR "the consumer build made no pagedattn_engine_step")
endif()
run_step("run the consumer" "${engine_step}")
message("${step_output}")
if(NOT step_output MATCHES "result +PASS")
  message(FATAL_ERROR "the installed example did not pass")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
