// `stalepipe data inspect|export|speed`: look at an image folder, write a data set as one,
// and time the input pipeline alone.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "flags.h"
#include "stalepipe/data/export.h"
#include "stalepipe/data/folder.h"
#include "stalepipe/data/registry.h"
#include "stalepipe/perf/loader_speed.h"

namespace stalepipe::cli {
namespace {

void print_split(const data::FolderReport::Split& s) {
  int64_t total = 0, readable = 0;
  for (int64_t n : s.per_class) total += n;
  for (const auto& [mode, count] : s.modes) readable += count;
  std::printf("%s: %lld image files, %lld readable", s.name.empty() ? "all" : s.name.c_str(),
              static_cast<long long>(total), static_cast<long long>(readable));
  if (readable > 0) {
    std::printf(", %lldx%lld to %lldx%lld pixels (height x width);", static_cast<long long>(s.min_height),
                static_cast<long long>(s.min_width), static_cast<long long>(s.max_height),
                static_cast<long long>(s.max_width));
    for (const auto& [mode, count] : s.modes) std::printf(" %s %lld", mode.c_str(), static_cast<long long>(count));
  }
  if (s.other_files > 0) std::printf("; %lld other files left out", static_cast<long long>(s.other_files));
  std::printf("\n");
}

// Exit status 1 where anything is wrong with the folder, so that scripts can check it.
int print_report(const std::string& dir, const data::FolderReport& r) {
  std::printf("%s: %zu classes\n", dir.c_str(), r.classes.size());
  for (const auto& s : r.splits) print_split(s);
  std::printf("%-24s", "class");
  for (const auto& s : r.splits) std::printf(" %10s", s.name.empty() ? "all" : s.name.c_str());
  std::printf("\n");
  for (size_t c = 0; c < r.classes.size(); ++c) {
    std::printf("%-24s", r.classes[c].c_str());
    for (const auto& s : r.splits) std::printf(" %10lld", static_cast<long long>(s.per_class[c]));
    std::printf("\n");
  }
  if (!r.bad.empty()) std::printf("unreadable: %zu files\n", r.bad.size());
  for (const auto& b : r.bad) std::printf("  %s\n", b.fault.c_str());
  if (!r.problems.empty()) std::printf("problems: %zu\n", r.problems.size());
  for (const auto& p : r.problems) std::printf("  %s\n", p.c_str());
  return r.bad.empty() && r.problems.empty() ? 0 : 1;
}

void add_inspect(CLI::App& app, std::shared_ptr<Command> run) {
  auto dir = std::make_shared<std::string>();
  auto megapixels = std::make_shared<double>(DataOptions().max_megapixels());
  auto threads = std::make_shared<int>(1);
  app.add_option("DIR", *dir, "an image folder (DIR/train/<class>/... or DIR/<class>/...)")->required();
  app.add_option(flag_of(Field::max_megapixels), *megapixels, "refuse images above this many megapixels")->capture_default_str();
  app.add_option("--threads", *threads, "threads reading the files")->capture_default_str();
  *run = [=]() { return print_report(*dir, data::inspect_folder(*dir, *megapixels, *threads)); };
}

void add_export(CLI::App& app, std::shared_ptr<Command> run) {
  auto spec = std::make_shared<std::string>(DataOptions().dataset());
  auto dir = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>("png");
  auto options = std::make_shared<data::ExportOptions>();
  app.add_option(flag_of(Field::dataset), *spec, "the data set to write")->capture_default_str();
  app.add_option("DIR", *dir, "where to write DIR/train/<class>/<index>.png and DIR/test/...")->required();
  app.add_option("--format", *format, "png | jpeg")->capture_default_str()->check(CLI::IsMember({"png", "jpeg"}));
  app.add_option("--quality", options->quality, "JPEG quality 1..100")->capture_default_str();
  app.add_option("--threads", options->threads, "threads encoding images")->capture_default_str();
  *run = [=]() {
    options->format = *format == "png" ? data::ImageFormat::kPng : data::ImageFormat::kJpeg;
    const data::SourceSplit split = data::load_sources(*spec);
    data::export_images(*split.train, *dir, "train", *options);
    data::export_images(*split.test, *dir, "test", *options);
    std::printf("wrote %lld training and %lld test images under %s\n", static_cast<long long>(split.train->size()),
                static_cast<long long>(split.test->size()), dir->c_str());
    return 0;
  };
}

void add_speed(CLI::App& app, std::shared_ptr<Command> run) {
  auto options = std::make_shared<Options>();
  auto text = std::make_shared<TrainFlags>();
  auto batches = std::make_shared<int64_t>(20);
  for (Field f : {Field::dataset, Field::batch_size, Field::image_size, Field::resized_crop, Field::augment,
                  Field::val_fraction, Field::max_megapixels, Field::data_threads, Field::threads, Field::seed}) {
    add_field_flag(app, *options, *text, f);
  }
  app.add_option("--batches", *batches, "batches to time, after one of warm-up")->capture_default_str();
  *run = [=]() {
    apply(*text, *options);
    const perf::LoaderSpeed s = perf::measure_loader(*options, *batches);
    std::printf("loader: %.0f img/s (%lld images of %lldx%lldx%lld in %.2f s, %d decode thread(s))\n",
                s.images_per_second, static_cast<long long>(s.images), static_cast<long long>(s.shape[0]),
                static_cast<long long>(s.shape[1]), static_cast<long long>(s.shape[2]), s.seconds, s.threads);
    return 0;
  };
}

}  // namespace

Command add_data(CLI::App& app) {
  app.require_subcommand(1);
  auto inspect = std::make_shared<Command>(), exported = std::make_shared<Command>(), speed = std::make_shared<Command>();
  add_inspect(*app.add_subcommand("inspect", "classes, counts, image kinds and sizes, and every unreadable file"), inspect);
  add_export(*app.add_subcommand("export", "write a data set as an image folder (PNG or JPEG)"), exported);
  add_speed(*app.add_subcommand("speed", "images/s of the input pipeline alone (decoding, crops, normalisation)"), speed);
  return [&app, inspect, exported, speed]() {
    if (app.got_subcommand("inspect")) return (*inspect)();
    if (app.got_subcommand("export")) return (*exported)();
    return (*speed)();
  };
}

}  // namespace stalepipe::cli
