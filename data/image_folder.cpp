// ImageFolder's listing with std::filesystem; every filesystem_error becomes an IOError naming the
// folder, since a listing fails on permissions and vanishing files as well as on missing roots.
#include "data/image_folder.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "core/ops/factory.h"
#include "kernels/error.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> normalized_extensions(const std::vector<std::string>& given) {
  if (given.empty()) return {".png", ".jpg", ".jpeg"};
  std::vector<std::string> out;
  for (const std::string& e : given) {
    if (e.empty() || e == ".") throw Error("ImageFolder: an empty file extension in the options");
    out.push_back(lower(e[0] == '.' ? e : "." + e));
  }
  return out;
}

bool is_image_name(const std::string& filename, const std::vector<std::string>& extensions) {
  const std::string name = lower(filename);
  for (const std::string& e : extensions) {
    if (name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0) return true;
  }
  return false;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : " ") + s;
  return out;
}

uLong crc_update(uLong crc, const std::string& s) {
  return crc32(crc, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size()));
}

}  // namespace

ImageFolder::ImageFolder(const std::string& root, ImageFolderOptions options)
    : root_(root), options_(std::move(options)) {
  image_mode_channels(options_.mode, 1);  // an invalid mode fails here, not in a worker
  const std::vector<std::string> extensions = normalized_extensions(options_.extensions);
  const fs::path root_path(root_);
  std::error_code ec;
  if (!fs::exists(root_path, ec)) throw IOError("ImageFolder: the root folder " + root_ + " does not exist");
  if (!fs::is_directory(root_path, ec)) throw IOError("ImageFolder: the root " + root_ + " is not a folder");

  try {
    for (const fs::directory_entry& e : fs::directory_iterator(root_path)) {
      if (e.is_directory()) classes_.push_back(e.path().filename().string());
    }
  } catch (const fs::filesystem_error& e) {
    throw IOError("ImageFolder: cannot list " + root_ + ": " + e.what());
  }
  if (classes_.empty()) {
    throw IOError("ImageFolder: " + root_ + " has no class folders (expected " + root_ + "/<class>/<images>)");
  }
  std::sort(classes_.begin(), classes_.end());

  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t k = 0; k < classes_.size(); ++k) {
    const std::string& name = classes_[k];
    class_to_index_[name] = static_cast<int64_t>(k);
    crc = crc_update(crc, "class " + name + "\n");
    const fs::path dir = root_path / name;
    std::vector<std::pair<std::string, uintmax_t>> files;  // path relative to the class folder, size
    try {
      // Directory links are followed, as torchvision's os.walk(followlinks=True); one that leads to
      // a folder it is inside of (a cycle, which the walk would follow forever) is refused.
      std::vector<fs::path> open_dirs{dir};  // the class folder, then the folders entered, by depth
      const auto walk_options =
          fs::directory_options::skip_permission_denied | fs::directory_options::follow_directory_symlink;
      for (auto it = fs::recursive_directory_iterator(dir, walk_options); it != fs::recursive_directory_iterator();
           ++it) {
        const fs::directory_entry& e = *it;
        if (e.is_directory()) {
          open_dirs.resize(static_cast<size_t>(it.depth()) + 1);
          for (const fs::path& a : open_dirs) {
            if (fs::equivalent(a, e.path())) {
              throw IOError("ImageFolder: the folder " + e.path().string() + " is " + a.string() +
                            " again (a link cycle), which the walk would follow forever");
            }
          }
          open_dirs.push_back(e.path());
          continue;
        }
        if (!e.is_regular_file() || !is_image_name(e.path().filename().string(), extensions)) continue;
        files.emplace_back(e.path().lexically_relative(dir).generic_string(), e.file_size());
      }
    } catch (const fs::filesystem_error& e) {
      throw IOError("ImageFolder: cannot list the class folder " + dir.string() + ": " + e.what());
    }
    if (files.empty()) {
      throw IOError("ImageFolder: the class folder " + dir.string() + " has no images (files ending in " +
                    joined(extensions) + ", any case)");
    }
    // As torchvision's sorted(os.walk(...)): folders by their path, then each one's files by name.
    std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) {
      const fs::path pa(a.first), pb(b.first);
      const std::string da = pa.parent_path().generic_string(), db = pb.parent_path().generic_string();
      return da != db ? da < db : pa.filename().string() < pb.filename().string();
    });
    for (const auto& [relative, bytes] : files) {
      samples_.emplace_back((dir / relative).string(), static_cast<int64_t>(k));
      crc = crc_update(crc, name + "/" + relative + '\0' + std::to_string(bytes) + "\n");
    }
  }
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc & 0xffffffffUL));
  fingerprint_ = {{"dataset", "ImageFolder"},
                  {"files", std::to_string(samples_.size())},
                  {"classes", std::to_string(classes_.size())},
                  {"crc32", hex}};
}

Example ImageFolder::get(int64_t index) const {
  check_index("ImageFolder", index, size());
  const auto& [path, target] = samples_[static_cast<size_t>(index)];
  Tensor image;
  try {
    image = options_.hwc ? read_image_hwc(path, options_.mode) : read_image(path, options_.mode);
  } catch (const IOError& e) {
    throw IOError("ImageFolder: sample " + std::to_string(index) + " (class " + classes_[static_cast<size_t>(target)] +
                  "): " + e.what());
  }
  if (options_.transform) image = options_.transform(image);
  return {image, scalar_tensor(target, TensorOptions(DType::Int64))};
}

}  // namespace kiln::data
