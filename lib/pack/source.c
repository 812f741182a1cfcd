/* Placeholder: replaced by the pack source implementation. */
#include "pack/source.h"
