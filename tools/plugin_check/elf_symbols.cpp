// elf_symbols.cpp — reading .dynsym of an ELF64 file.
#include "elf_symbols.h"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace fl::check {

std::vector<std::string> exported_symbols(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Elf64_Ehdr header{};
  if (bytes.size() < sizeof(header)) throw std::runtime_error("not an ELF file (too short)");
  std::memcpy(&header, bytes.data(), sizeof(header));
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) throw std::runtime_error("not an ELF file");
  if (header.e_ident[EI_CLASS] != ELFCLASS64) throw std::runtime_error("not an ELF64 file");
  auto section = [&](size_t i) {
    Elf64_Shdr sh{};
    size_t at = header.e_shoff + i * sizeof(Elf64_Shdr);
    if (at + sizeof(sh) > bytes.size()) throw std::runtime_error("truncated section table");
    std::memcpy(&sh, bytes.data() + at, sizeof(sh));
    return sh;
  };
  for (size_t i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr sh = section(i);
    if (sh.sh_type != SHT_DYNSYM) continue;
    Elf64_Shdr strtab = section(sh.sh_link);
    if (sh.sh_offset + sh.sh_size > bytes.size() || strtab.sh_offset + strtab.sh_size > bytes.size())
      throw std::runtime_error("truncated .dynsym");
    std::vector<std::string> names;
    for (size_t k = 1; k < sh.sh_size / sizeof(Elf64_Sym); ++k) {
      Elf64_Sym sym{};
      std::memcpy(&sym, bytes.data() + sh.sh_offset + k * sizeof(Elf64_Sym), sizeof(sym));
      const unsigned bind = ELF64_ST_BIND(sym.st_info), visibility = ELF64_ST_VISIBILITY(sym.st_other);
      if (sym.st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK) ||
          (visibility != STV_DEFAULT && visibility != STV_PROTECTED) || sym.st_name >= strtab.sh_size)
        continue;
      names.emplace_back(bytes.data() + strtab.sh_offset + sym.st_name);
    }
    return names;
  }
  throw std::runtime_error("no .dynsym section (not a shared object?)");
}

}  // namespace fl::check
