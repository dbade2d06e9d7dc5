# cowstate_embed_file(INPUT OUTPUT SYMBOL): writes a C++ source OUTPUT defining
#   extern const char SYMBOL[];  (the bytes of INPUT, NUL-terminated)
# at configure time, and reconfigures when INPUT changes. Bytes, not a string literal, so
# nothing in INPUT (quotes, backslashes, '@', a ")" that ends a raw string) needs escaping.
function(cowstate_embed_file input output symbol)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${input})
  file(READ ${input} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
  file(WRITE ${output}.tmp "// Generated from ${input} by cmake/embed_file.cmake: do not edit.\n"
                           "extern const char ${symbol}[];\nconst char ${symbol}[] = {\n${bytes}0};\n")
  file(COPY_FILE ${output}.tmp ${output} ONLY_IF_DIFFERENT)
endfunction()
