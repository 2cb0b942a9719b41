// elf_symbols.h — the dynamic symbols an ELF64 shared object exports (defined, global or
// weak, default or protected visibility), read from .dynsym.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace fl::check {

// Throws std::runtime_error when the file is not an ELF64 object with a .dynsym section.
std::vector<std::string> exported_symbols(const std::filesystem::path& file);

}  // namespace fl::check
