// The filter registry: which names templates may use (resolved by the parser at load time).
#include <algorithm>
#include <utility>

#include "formats/jinja/filters_impl.h"

namespace gk::jinja {
namespace {

const std::pair<std::string_view, FilterFn> kFilters[] = {
    {"abs", filters::Abs},
    {"attr", filters::Attr},
    {"capitalize", filters::Capitalize},
    {"count", filters::Length},
    {"d", filters::Default},
    {"default", filters::Default},
    {"dictsort", filters::DictSort},
    {"e", filters::Escape},
    {"escape", filters::Escape},
    {"first", filters::First},
    {"float", filters::Float},
    {"forceescape", filters::Escape},
    {"indent", filters::Indent},
    {"int", filters::Int},
    {"items", filters::Items},
    {"join", filters::Join},
    {"last", filters::Last},
    {"length", filters::Length},
    {"list", filters::List},
    {"lower", filters::Lower},
    {"map", filters::Map},
    {"max", filters::Max},
    {"min", filters::Min},
    {"reject", filters::Reject},
    {"rejectattr", filters::RejectAttr},
    {"replace", filters::Replace},
    {"reverse", filters::Reverse},
    {"round", filters::Round},
    {"safe", filters::Safe},
    {"select", filters::Select},
    {"selectattr", filters::SelectAttr},
    {"sort", filters::Sort},
    {"string", filters::String},
    {"sum", filters::Sum},
    {"title", filters::Title},
    {"tojson", filters::ToJson},
    {"trim", filters::Trim},
    {"unique", filters::Unique},
    {"upper", filters::Upper},
};

// jinja2 3.1 filters we leave out (chat templates do not use them).
constexpr std::string_view kJinjaOnly[] = {"batch", "center", "filesizeformat", "format", "groupby",
                                           "pprint", "random", "slice", "striptags", "truncate",
                                           "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"};

}  // namespace

FilterFn FindFilter(std::string_view name) {
  for (const auto& [filter_name, fn] : kFilters) {
    if (filter_name == name) return fn;
  }
  return nullptr;
}

bool IsJinjaFilter(std::string_view name) {
  return FindFilter(name) || std::find(std::begin(kJinjaOnly), std::end(kJinjaOnly), name) != std::end(kJinjaOnly);
}

}  // namespace gk::jinja
