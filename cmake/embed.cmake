# Turns text file IN into a header OUT defining `static const char NAME[]`.
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
file(WRITE ${OUT} "/* generated from ${NAME}; do not edit */\nstatic const char ${NAME}[] = {${hex} 0x00};\n")
