# Layer check (run by the build: `cmake -P check_layers.cmake`, see CMakeLists.txt). Every file of a
# layer may include only headers of its own layer and of the layers it builds on, directly or not.
#
# Inputs (-D): SOURCE_DIR, the project root; LAYERS, the layers lowest first, as "name:dep1,dep2"
# entries separated by ";" (the direct dependencies; the check closes them transitively); STAMP, a
# file touched when the check passes.
#
# Which layer a file belongs to:
#   - a public header says it in its opening lines: "(<name> layer)" (include/loom/**.h);
#   - a file under src/<dir>/ belongs to the layer that lists <dir> (by default the layer's name; a
#     layer with more folders names them as "name:deps:dir1,dir2").
# Includes checked: "loom/..." (public headers) and "<dir>/..." (another layer's private headers).
cmake_minimum_required(VERSION 3.22)

set(layer_names "")
foreach(entry IN LISTS LAYERS)
  string(REPLACE ":" ";" parts "${entry}")
  list(LENGTH parts n)
  list(GET parts 0 name)
  set(deps "")
  set(dirs "${name}")
  if(n GREATER 1)
    list(GET parts 1 deps)
    string(REPLACE "," ";" deps "${deps}")
  endif()
  if(n GREATER 2)
    list(GET parts 2 dirs)
    string(REPLACE "," ";" dirs "${dirs}")
  endif()
  foreach(d IN LISTS deps)
    if(NOT d IN_LIST layer_names)
      message(FATAL_ERROR "[layers] layer '${name}' builds on '${d}', which is not declared before it")
    endif()
  endforeach()
  # Transitive closure: a layer may use what its dependencies may use.
  set(allowed_${name} "${name}")
  foreach(d IN LISTS deps)
    list(APPEND allowed_${name} ${allowed_${d}})
  endforeach()
  list(REMOVE_DUPLICATES allowed_${name})
  foreach(d IN LISTS dirs)
    set(dir_layer_${d} "${name}")
  endforeach()
  list(APPEND layer_names "${name}")
endforeach()

# Public headers: their own declaration.
file(GLOB_RECURSE headers RELATIVE "${SOURCE_DIR}/include/loom" "${SOURCE_DIR}/include/loom/*.h")
set(problems "")
foreach(h IN LISTS headers)
  file(STRINGS "${SOURCE_DIR}/include/loom/${h}" opening LIMIT_COUNT 6)
  string(REGEX MATCH "\\(([a-z]+) layer" found "${opening}")
  set(layer "${CMAKE_MATCH_1}")
  if(NOT layer OR NOT layer IN_LIST layer_names)
    string(APPEND problems "  include/loom/${h}: its opening lines do not name its layer as \"(<layer> layer)\" "
                           "with one of: ${layer_names}\n")
  endif()
  set(header_layer_${h} "${layer}")
endforeach()

function(check_file path layer)
  file(STRINGS "${SOURCE_DIR}/${path}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS lines)
    string(REGEX MATCH "\"([^\"]+)\"" _ "${line}")
    set(inc "${CMAKE_MATCH_1}")
    set(target "")
    if(inc MATCHES "^loom/(.+)$")
      set(target "${header_layer_${CMAKE_MATCH_1}}")
    elseif(inc MATCHES "^([a-z_]+)/")
      set(target "${dir_layer_${CMAKE_MATCH_1}}")
    endif()
    if(target AND NOT target IN_LIST allowed_${layer})
      string(REPLACE ";" ", " may "${allowed_${layer}}")
      set(problems "${problems}  ${path}: includes \"${inc}\" (layer ${target}), which is above layer ${layer}; ${layer} may use: ${may}\n" PARENT_SCOPE)
    endif()
  endforeach()
endfunction()

foreach(h IN LISTS headers)
  if(header_layer_${h})
    check_file("include/loom/${h}" "${header_layer_${h}}")
  endif()
endforeach()
file(GLOB src_dirs RELATIVE "${SOURCE_DIR}/src" "${SOURCE_DIR}/src/*")
foreach(d IN LISTS src_dirs)
  if(NOT IS_DIRECTORY "${SOURCE_DIR}/src/${d}")
    continue()
  endif()
  if(NOT dir_layer_${d})
    string(APPEND problems "  src/${d}/: no layer lists this folder\n")
    continue()
  endif()
  file(GLOB_RECURSE files RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/src/${d}/*.cpp" "${SOURCE_DIR}/src/${d}/*.h"
       "${SOURCE_DIR}/src/${d}/*.cu")
  foreach(f IN LISTS files)
    check_file("${f}" "${dir_layer_${d}}")
  endforeach()
endforeach()

if(problems)
  message(FATAL_ERROR "[layers] a lower layer reaches up (the order is in CMakeLists.txt and docs/architecture.md):\n${problems}")
endif()
if(STAMP)
  file(TOUCH "${STAMP}")
endif()
