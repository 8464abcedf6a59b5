// The installed shared library (CMakeLists.txt, "install") is the static library linked whole;
// CMake needs at least one source of its own for a library target, and this is it. It defines
// nothing, so that no symbol exists twice.
