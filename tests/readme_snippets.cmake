# The READMEs' copies of the project's own text must be that text, so that what a reader sees is
# what CTest compiles, runs and checks:
#   - a block marked <!-- snippet: PATH --> must be PATH's whole text (PATH relative to the
#     repository root), in every README.md of the project (README.md, */README.md,
#     */*/README.md; build folders left out); the top README must have at least one;
#   - the block marked <!-- header: NAME --> (README.md: THE PRESETS) must be the section NAME of
#     the doc comment at the top of normblocks.h: from its line "   NAME" up to the blank line
#     before the next section ("   TENSOR NAMES"), each line without the comment's 3-space indent.
#   cmake -DROOT=<repo> -P this                 checks
#   cmake -DROOT=<repo> -DFIX=1 -P this         also rewrites the README's header blocks from
#                                               normblocks.h (snippets are left to copy by hand)
# A snippet or a header block is the fenced block right after its marker line: ```LANG, the
# text, ``` (a header block's LANG is text). Prose must not spell a marker out whole.

cmake_minimum_required(VERSION 3.16)
file(GLOB readmes RELATIVE "${ROOT}" "${ROOT}/README.md" "${ROOT}/*/README.md"
     "${ROOT}/*/*/README.md")
list(FILTER readmes EXCLUDE REGEX "^(build[^/]*|\\.[^/]*)/")
list(SORT readmes)
if(NOT "README.md" IN_LIST readmes)
  message(FATAL_ERROR "no README.md at ${ROOT}")
endif()

# the fenced block after position AT (the end of a marker) of TEXT: its text into OUT, or an error
function(fenced_block text at rel mark out)
  string(SUBSTRING "${text}" ${at} -1 rest)
  string(REGEX MATCH "^\n```[A-Za-z0-9+-]*\n" fence "${rest}")
  if(NOT fence)
    message(FATAL_ERROR "${rel}: ${mark} is not followed by a fenced block (```LANG on the next line)")
  endif()
  string(LENGTH "${fence}" skip)
  string(SUBSTRING "${rest}" ${skip} -1 rest)
  string(FIND "${rest}" "\n```\n" end)
  if(end LESS 0)
    message(FATAL_ERROR "${rel}: the block after ${mark} has no closing ```")
  endif()
  string(SUBSTRING "${rest}" 0 ${end} block)
  set(${out} "${block}" PARENT_SCOPE)
endfunction()

# section NAME of normblocks.h's top doc comment, without its 3-space indent, into OUT
file(READ "${ROOT}/normblocks.h" header)
string(FIND "${header}" "*/" doc_end)
string(SUBSTRING "${header}" 0 ${doc_end} header_doc)
function(header_section name out)
  string(FIND "${header_doc}" "\n   ${name}" at)
  if(at LESS 0)
    message(FATAL_ERROR "normblocks.h's top comment has no section \"   ${name}\"")
  endif()
  math(EXPR at "${at} + 1")
  string(SUBSTRING "${header_doc}" ${at} -1 rest)
  # the section ends at the blank line before the next line indented by exactly 3 spaces
  string(REGEX MATCH "\n\n   [^ ]" next "${rest}")
  if(next)
    string(FIND "${rest}" "${next}" end)
    string(SUBSTRING "${rest}" 0 ${end} rest)
  endif()
  string(REGEX REPLACE "\n+$" "" rest "${rest}")
  string(REGEX REPLACE "^   " "" rest "${rest}")
  string(REPLACE "\n   " "\n" rest "${rest}")
  set(${out} "${rest}" PARENT_SCOPE)
endfunction()

foreach(rel IN LISTS readmes)
  file(READ "${ROOT}/${rel}" readme)

  string(REGEX MATCHALL "<!-- snippet: [^ ]+ -->" marks "${readme}")
  if(rel STREQUAL "README.md" AND NOT marks)
    message(FATAL_ERROR "README.md has no <!-- snippet: PATH --> block (the quickstart's)")
  endif()
  foreach(mark IN LISTS marks)
    string(REGEX REPLACE "<!-- snippet: ([^ ]+) -->" "\\1" path "${mark}")
    if(NOT EXISTS "${ROOT}/${path}" OR IS_DIRECTORY "${ROOT}/${path}")
      message(FATAL_ERROR "${rel}: ${mark} names no file (PATH is relative to the repository root)")
    endif()
    string(FIND "${readme}" "${mark}" at)
    string(LENGTH "${mark}" len)
    math(EXPR at "${at} + ${len}")
    fenced_block("${readme}" ${at} "${rel}" "${mark}" block)
    file(READ "${ROOT}/${path}" want)
    string(REGEX REPLACE "\n$" "" want "${want}")
    if(NOT block STREQUAL want)
      message(FATAL_ERROR "${rel}'s copy of ${path} differs from the file: copy the file in")
    endif()
    message(STATUS "${rel} block = ${path}")
  endforeach()

  string(REGEX MATCHALL "<!-- header: [^>]+ -->" marks "${readme}")
  set(fixed "${readme}")
  foreach(mark IN LISTS marks)
    string(REGEX REPLACE "<!-- header: (.+) -->" "\\1" name "${mark}")
    header_section("${name}" want)
    string(FIND "${readme}" "${mark}" at)
    string(LENGTH "${mark}" len)
    math(EXPR at "${at} + ${len}")
    fenced_block("${readme}" ${at} "${rel}" "${mark}" block)
    if(block STREQUAL want)
      message(STATUS "${rel} block = normblocks.h's ${name}")
    elseif(FIX)
      set(before "${fixed}")
      string(REPLACE "${mark}\n```text\n${block}\n```\n" "${mark}\n```text\n${want}\n```\n"
             fixed "${fixed}")
      if(fixed STREQUAL before)
        message(FATAL_ERROR "${rel}: the block after ${mark} is not a ```text block: cannot fix it")
      endif()
      message(STATUS "${rel}: copied normblocks.h's ${name} in")
    elseif(name STREQUAL "THE PRESETS")
      message(FATAL_ERROR "${rel}'s presets differ from normblocks.h's THE PRESETS block: copy it "
              "in (cmake -DFIX=1 -DROOT=<repository> -P tests/readme_snippets.cmake does)")
    else()
      message(FATAL_ERROR "${rel}'s ${name} block differs from normblocks.h's ${name} block: "
              "copy it in (cmake -DFIX=1 -DROOT=<repository> -P tests/readme_snippets.cmake does)")
    endif()
  endforeach()
  if(FIX AND NOT fixed STREQUAL readme)
    file(WRITE "${ROOT}/${rel}" "${fixed}")
  endif()
endforeach()
if(NOT "${header_doc}" MATCHES "\n   THE PRESETS")
  message(FATAL_ERROR "normblocks.h has no THE PRESETS section")
endif()
file(READ "${ROOT}/README.md" top)
if(NOT top MATCHES "<!-- header: THE PRESETS -->")
  message(FATAL_ERROR "README.md has no <!-- header: THE PRESETS --> block: the presets are "
          "normblocks.h's THE PRESETS block, copied in")
endif()
