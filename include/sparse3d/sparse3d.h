// sparse3d: inference engine for sparse-voxel 3D flow transformers (TRELLIS.2).
// The one header a program includes; docs/API.md describes it.
#pragma once

#include "sparse3d/engine.h"
#include "sparse3d/flags.h"
#include "sparse3d/glb.h"
#include "sparse3d/messages.h"
#include "sparse3d/sampler_settings.h"
#include "sparse3d/synthetic.h"
#include "sparse3d/types.h"
