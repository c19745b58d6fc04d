# Installing tapegrad: `cmake --install build --prefix P` puts
#   P/include/tapegrad/   the public headers (tapegrad.h brings in all of them)
#   P/lib/                libtapegrad.a, or libtapegrad.so.X.Y.Z + links (BUILD_SHARED_LIBS)
#   P/lib/pkgconfig/      tapegrad.pc
#   P/lib/cmake/tapegrad/ tapegradConfig.cmake, its version file, the target tapegrad::tapegrad
#   P/bin/                the experiment programs (experiments/CMakeLists.txt)
# Everything is relocatable: the .pc and the CMake files find the prefix from
# where they are, and the programs find a shared library through $ORIGIN/../lib.
include(CMakePackageConfigHelpers)

# 0.x: a minor version may change the API or the ABI, so the soname and the
# CMake compatibility rule follow major.minor; from 1.0 on, the major alone.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(TG_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  set(TG_COMPAT SameMinorVersion)
else()
  set(TG_SOVERSION ${PROJECT_VERSION_MAJOR})
  set(TG_COMPAT SameMajorVersion)
endif()
set_target_properties(tapegrad tapegrad_attn tapegrad_train PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${TG_SOVERSION})

# The public API is exactly these headers; they include one another by plain
# name, which resolves next to the including header once installed. core/parallel.h
# (threading, includes cblas.h and omp.h) stays internal.
set(TG_PUBLIC_HEADERS core/tg_core.h core/safetensors.h core/gradcheck.h core/tg_blas.h core/tg_file.h core/tg_profile.h core/tg_child.h core/tg_precision.h optim/tg_optim.h
    ops/tg_gemm_plan.h ops/attn_args.h ops/attn_tables.h ops/attn_kernel.h)
foreach(op IN LISTS TG_OPS)
  list(APPEND TG_PUBLIC_HEADERS ops/${op}.h)
endforeach()
list(TRANSFORM TG_PUBLIC_HEADERS PREPEND ${PROJECT_SOURCE_DIR}/)
list(APPEND TG_PUBLIC_HEADERS ${PROJECT_BINARY_DIR}/include/tg_ops.h ${PROJECT_BINARY_DIR}/include/tg_version.h
     ${PROJECT_BINARY_DIR}/include/tapegrad.h)
# The kernel layer's headers (experiments/libtapegrad_attn/tg_*.h, since 0.20) and its umbrella
# attn.h, but its internal SHA-256 (hidden in the shared library, not installed).
file(GLOB TG_ATTN_HEADERS ${PROJECT_SOURCE_DIR}/experiments/libtapegrad_attn/tg_*.h)
list(REMOVE_ITEM TG_ATTN_HEADERS ${PROJECT_SOURCE_DIR}/experiments/libtapegrad_attn/tg_sha256.h)
configure_file(scripts/cmake/attn.h.in include/attn.h @ONLY)
list(APPEND TG_PUBLIC_HEADERS ${TG_ATTN_HEADERS} ${PROJECT_BINARY_DIR}/include/attn.h)
# The training kit's headers (experiments/libtapegrad_train/tg_*.h) and its umbrella train.h.
file(GLOB TG_TRAIN_HEADERS ${PROJECT_SOURCE_DIR}/experiments/libtapegrad_train/tg_*.h)
# ... but the kit's internals (docs/install.md#the-training-kits-public-face): hidden in the shared
# library, not installed. (The experiments' model, tasks and corpus: experiments/model, never installed.)
set(TG_KIT_INTERNAL_HEADERS tg_runlock.h)
foreach(h IN LISTS TG_KIT_INTERNAL_HEADERS)
  list(REMOVE_ITEM TG_TRAIN_HEADERS ${PROJECT_SOURCE_DIR}/experiments/libtapegrad_train/${h})
endforeach()
configure_file(scripts/cmake/train.h.in include/train.h @ONLY)
list(APPEND TG_PUBLIC_HEADERS ${TG_TRAIN_HEADERS} ${PROJECT_BINARY_DIR}/include/train.h)
install(FILES ${TG_PUBLIC_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tapegrad)
# The same headers as an installed tree would have them, in the build tree
# (build/stage/include/tapegrad/), for the tests' out-of-tree plugins.
add_custom_target(tg_stage_headers ALL
  COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/stage/include/tapegrad
  COMMAND ${CMAKE_COMMAND} -E copy_if_different ${TG_PUBLIC_HEADERS} ${PROJECT_BINARY_DIR}/stage/include/tapegrad
  DEPENDS ${TG_PUBLIC_HEADERS})

# Exported from libtapegrad.so: tg_* names only. The version script hides
# everything else, including the symbols of any static archive linked in.
if(BUILD_SHARED_LIBS)
  set(map ${PROJECT_SOURCE_DIR}/scripts/cmake/tapegrad.map)
  foreach(lib tapegrad tapegrad_attn tapegrad_train)
    target_link_options(${lib} PRIVATE "LINKER:--version-script=${map}")
    set_property(TARGET ${lib} APPEND PROPERTY LINK_DEPENDS ${map})
    if(NOT TG_SANITIZE AND NOT TG_FUZZ)   # the sanitizer runtimes are resolved at load time
      target_link_options(${lib} PRIVATE "LINKER:-z,defs")   # every dependency recorded in the .so
    endif()
  endforeach()
endif()

if(TG_TEST_HOOKS)
  install(CODE "message(WARNING \"tapegrad: this build has its test hooks compiled in (TG_TEST_HOOKS): configure with -DBUILD_TESTING=OFF (or -DTG_TEST_HOOKS=OFF) for a library to install\")")
endif()
install(TARGETS tapegrad tapegrad_attn tapegrad_train EXPORT tapegradTargets INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set_target_properties(tapegrad_train PROPERTIES EXPORT_NAME train)   # tapegrad::train
set_target_properties(tapegrad_attn PROPERTIES EXPORT_NAME attn)     # tapegrad::attn
set(cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/tapegrad)
install(EXPORT tapegradTargets NAMESPACE tapegrad:: DESTINATION ${cmakedir})
if(BUILD_SHARED_LIBS)
  set(TG_STATIC OFF)
else()
  set(TG_STATIC ON)
endif()
configure_package_config_file(scripts/cmake/tapegradConfig.cmake.in tapegradConfig.cmake INSTALL_DESTINATION ${cmakedir})
write_basic_package_version_file(tapegradConfigVersion.cmake COMPATIBILITY ${TG_COMPAT})
install(FILES ${PROJECT_BINARY_DIR}/tapegradConfig.cmake ${PROJECT_BINARY_DIR}/tapegradConfigVersion.cmake
        DESTINATION ${cmakedir})

# tapegrad.pc: a static link needs the private dependencies, a shared one does not
# (pkg-config --static adds Requires.private and Libs.private).
list(JOIN TG_PRIVATE_PKGS " " TG_PC_REQUIRES_PRIVATE)
set(TG_PC_LIBS_PRIVATE "")
foreach(lib IN LISTS OpenMP_C_LIB_NAMES ITEMS m)
  string(APPEND TG_PC_LIBS_PRIVATE " -l${lib}")
endforeach()
string(STRIP "${TG_PC_LIBS_PRIVATE}" TG_PC_LIBS_PRIVATE)
file(RELATIVE_PATH TG_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)   # ../..
string(REGEX REPLACE "/$" "" TG_PC_TO_PREFIX "${TG_PC_TO_PREFIX}")
configure_file(scripts/cmake/tapegrad.pc.in tapegrad.pc @ONLY)
configure_file(scripts/cmake/tapegrad-train.pc.in tapegrad-train.pc @ONLY)
configure_file(scripts/cmake/tapegrad-attn.pc.in tapegrad-attn.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tapegrad.pc ${PROJECT_BINARY_DIR}/tapegrad-train.pc ${PROJECT_BINARY_DIR}/tapegrad-attn.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The log tools: scripts that read any log of the schema (docs/logs.md), under
# share/tapegrad/, and one command on PATH, bin/tapegrad-logs, that runs them.
install(FILES scripts/plot.sh scripts/summarize.sh scripts/logat.sh scripts/plot_attn.sh scripts/tglogs.py
              scripts/loss.gp scripts/entropy.gp scripts/heatmap.gp scripts/valloss.gp
        DESTINATION ${CMAKE_INSTALL_DATADIR}/tapegrad
        PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
# The exec protocol's kernel side (docs/exec_protocol.md): a Python module, standard library only
# (its PyTorch layer imports torch when called), for PYTHONPATH=<prefix>/share/tapegrad/python.
# tapegrad_log (0.23): your own training loop writes tapegrad's log format (docs/logs.md#bring-your-own-logs).
install(FILES scripts/python/tapegrad_exec.py scripts/python/exec_conformance.py scripts/python/tapegrad_log.py DESTINATION ${CMAKE_INSTALL_DATADIR}/tapegrad/python)
file(RELATIVE_PATH TG_BIN_TO_DATA /prefix/${CMAKE_INSTALL_BINDIR} /prefix/${CMAKE_INSTALL_DATADIR}/tapegrad)
configure_file(scripts/cmake/tapegrad-logs.in tapegrad-logs @ONLY)
install(PROGRAMS ${PROJECT_BINARY_DIR}/tapegrad-logs DESTINATION ${CMAKE_INSTALL_BINDIR})
