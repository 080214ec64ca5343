// stalepipe: pipelined training of CNNs with stale weights (PPL-SGD), as a C++ library.
// One include for users; docs/api.md is the tour.
//
//   models::ModelBuilder   your LibTorch modules as an ordered list of units (model_builder.h)
//   models::make_model     the zoo: lenet5, alexnet, vgg16, resnet18, resnet<6n+2> (zoo.h)
//   PipelineOptions        where the registers go, schedule, executor, devices, SGD
//   PipelineTrainer        fit / feed+flush / evaluate / save+load (pipeline_trainer.h)
//   data::load_dataset     Fashion-MNIST, MNIST, CIFAR-10, synthetic (data/registry.h)
//   data::Loader           batches of any SampleSource: in memory, an image folder, your own
//                          reader (data/source.h, data/folder.h); LoaderSource feeds fit()
#pragma once

// The release (CMakeLists.txt project(VERSION) checks that they agree).
#define STALEPIPE_VERSION_MAJOR 0
#define STALEPIPE_VERSION_MINOR 4
#define STALEPIPE_VERSION_PATCH 0

#include "stalepipe/api/ahead_batches.h"
#include "stalepipe/api/assemble.h"
#include "stalepipe/api/loader_source.h"
#include "stalepipe/api/options.h"
#include "stalepipe/api/option_fields.h"
#include "stalepipe/api/options_json.h"
#include "stalepipe/api/pipeline_trainer.h"
#include "stalepipe/common/error.h"
#include "stalepipe/data/dataset.h"
#include "stalepipe/data/folder.h"
#include "stalepipe/data/image.h"
#include "stalepipe/data/loader.h"
#include "stalepipe/data/normalize.h"
#include "stalepipe/data/registry.h"
#include "stalepipe/data/source.h"
#include "stalepipe/data/torch_dataset.h"
#include "stalepipe/models/model.h"
#include "stalepipe/models/model_builder.h"
#include "stalepipe/models/zoo.h"
