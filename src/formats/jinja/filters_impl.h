// The filter functions, for the registry in filters.cc. Text and number filters live in
// filters_text.cc, filters over sequences in filters_seq.cc.
#pragma once

#include "formats/jinja/builtins.h"

namespace gk::jinja::filters {

#define GK_FILTER(name) Result<Value> name(const Value& input, const CallArgs& args, BuiltinContext& ctx)

// filters_text.cc
GK_FILTER(Abs);
GK_FILTER(Attr);
GK_FILTER(Capitalize);
GK_FILTER(Default);
GK_FILTER(Escape);
GK_FILTER(Float);
GK_FILTER(Indent);
GK_FILTER(Int);
GK_FILTER(Length);
GK_FILTER(Lower);
GK_FILTER(Replace);
GK_FILTER(Round);
GK_FILTER(Safe);
GK_FILTER(String);
GK_FILTER(Title);
GK_FILTER(ToJson);
GK_FILTER(Trim);
GK_FILTER(Upper);

// filters_seq.cc
GK_FILTER(DictSort);
GK_FILTER(First);
GK_FILTER(Items);
GK_FILTER(Join);
GK_FILTER(Last);
GK_FILTER(List);
GK_FILTER(Map);
GK_FILTER(Max);
GK_FILTER(Min);
GK_FILTER(Reject);
GK_FILTER(RejectAttr);
GK_FILTER(Reverse);
GK_FILTER(Select);
GK_FILTER(SelectAttr);
GK_FILTER(Sort);
GK_FILTER(Sum);
GK_FILTER(Unique);

#undef GK_FILTER

}  // namespace gk::jinja::filters
