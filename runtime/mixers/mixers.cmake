# recur_read_mixers(TAGS CONFIG_NAMES FILES): the lines of mixers.inc, in
# union tag order, as three lists of the same length (a FILES entry repeats
# where one file serves several tags). Re-runs CMake when the list changes.
set(RECUR_MIXERS_INC ${CMAKE_CURRENT_LIST_DIR}/mixers.inc)

function(recur_read_mixers tags_var config_names_var files_var)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${RECUR_MIXERS_INC})
  file(STRINGS ${RECUR_MIXERS_INC} lines REGEX "^RECUR_MIXER")
  set(tags "")
  set(config_names "")
  set(files "")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^RECUR_MIXER\\(([A-Za-z0-9]+), *([a-z0-9_]+), *([a-z0-9_]+)\\) *$")
      message(FATAL_ERROR "mixers.inc: '${line}' is not RECUR_MIXER(UnionTag, config_name, file)")
    endif()
    list(APPEND tags ${CMAKE_MATCH_1})
    list(APPEND config_names ${CMAKE_MATCH_2})
    list(APPEND files ${CMAKE_MATCH_3})
  endforeach()
  set(${tags_var} ${tags} PARENT_SCOPE)
  set(${config_names_var} ${config_names} PARENT_SCOPE)
  set(${files_var} ${files} PARENT_SCOPE)
endfunction()
