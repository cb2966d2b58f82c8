# _torch_ops: the TORCH_LIBRARY(echo, ...) ops (src/torch/ops.cpp) and the table of compiled
# instantiations (src/torch/table.cpp, generated .cu shards of echo/registry.cuh). A plain shared library that
# echo_allreduce/ops.py loads with torch.ops.load_library: it links libtorch, not Python.
if(NOT ECHO_WITH_CUDA)
  message(FATAL_ERROR "ECHO_BUILD_TORCH needs the CUDA toolkit and NCCL (nvcc on PATH or CUDACXX); "
                      "set ECHO_BUILD_TORCH=OFF to build the host reference only")
endif()
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
    "import torch, torch.utils.cpp_extension as e; print('|'.join(e.include_paths())); print('|'.join(e.library_paths())); print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(torch.version.cuda or '')"
  OUTPUT_VARIABLE torch_info OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ECHO_BUILD_TORCH: ${Python_EXECUTABLE} cannot import torch; install torch, "
                      "or set ECHO_BUILD_TORCH=OFF to build the host reference only")
endif()
string(REPLACE "\n" ";" torch_info "${torch_info}")
list(GET torch_info 0 torch_includes)
list(GET torch_info 1 torch_libdirs)
list(GET torch_info 2 torch_cxx11_abi)
string(REPLACE "|" ";" torch_includes "${torch_includes}")
string(REPLACE "|" ";" torch_libdirs "${torch_libdirs}")
list(LENGTH torch_info torch_info_len)
if(torch_info_len LESS 4)  # torch.version.cuda printed nothing
  message(FATAL_ERROR "ECHO_BUILD_TORCH: the installed torch has no CUDA (a CPU-only build); install a CUDA torch, "
                      "or set ECHO_BUILD_TORCH=OFF")
endif()
message(STATUS "echo_allreduce: torch ops against torch in ${torch_libdirs} (CUDA ${CMAKE_CUDA_COMPILER_VERSION})")

foreach(lib torch torch_cpu torch_cuda c10 c10_cuda)
  find_library(ECHO_PY_TORCH_${lib} ${lib} PATHS ${torch_libdirs} NO_DEFAULT_PATH REQUIRED)
  list(APPEND torch_libraries ${ECHO_PY_TORCH_${lib}})
endforeach()

# The table (src/torch/table.cpp) over echo/registry.cuh's entries marked tool::torch (cuda_ipc)
# and tool::torch_nccl, split into generated translation units (cmake/echo-shards.cmake): a shard
# holds about one quantizer's all_reduce with every compensator, some 5
# full pipelines, the unit of a parallel build. More entries than shards only make shards longer.
set(gen ${CMAKE_CURRENT_BINARY_DIR}/torch)
echo_registry_shards(echo_py_units 20 ${gen} cu "#include \"instance.cuh\"" echo_py::torch_ops void add_shard
                     "std::vector<entry>& table" table)

add_library(_torch_ops MODULE src/torch/ops.cpp src/torch/table.cpp ${echo_py_units})
target_include_directories(_torch_ops PRIVATE ${gen} ${CMAKE_CURRENT_SOURCE_DIR}/src/torch)
set_target_properties(_torch_ops PROPERTIES
  PREFIX ""
  CUDA_RUNTIME_LIBRARY Shared          # the libcudart torch loads, not a second static runtime
  CXX_VISIBILITY_PRESET hidden
  CUDA_VISIBILITY_PRESET hidden)
target_compile_features(_torch_ops PRIVATE cxx_std_17 cuda_std_17)
# torch's headers only where they are used (ops.cpp): the .cu files see Echo alone.
set_source_files_properties(src/torch/ops.cpp PROPERTIES INCLUDE_DIRECTORIES "${torch_includes}")
# Every file: std::string and std::function cross between them and libtorch.
target_compile_definitions(_torch_ops PRIVATE _GLIBCXX_USE_CXX11_ABI=${torch_cxx11_abi})
target_link_libraries(_torch_ops PRIVATE echo::echo ${torch_libraries})  # echo::echo: + CUDA::cudart, NCCL
echo_py_shared_libstdcxx(_torch_ops)  # python/CMakeLists.txt
# Found at run time where torch has put them (torch is imported first).
set_target_properties(_torch_ops PROPERTIES INSTALL_RPATH "$ORIGIN" BUILD_WITH_INSTALL_RPATH OFF)
install(TARGETS _torch_ops LIBRARY DESTINATION echo_allreduce COMPONENT python)
