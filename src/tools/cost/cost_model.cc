#include "tools/cost/cost_model.h"

#include <cmath>
#include <cstdio>

namespace gk::cost {

TrainingCost TrainingCostOf(double hours, double tokens, double price_per_hour) {
  TrainingCost c;
  c.hours = hours;
  c.tokens = tokens;
  c.price_per_hour = price_per_hour;
  c.cost = hours * price_per_hour;
  c.cost_per_m_tokens = tokens > 0 ? c.cost / (tokens / 1e6) : 0;
  return c;
}

ServingCost ServingCostOf(const std::string& workload, double output_tok_per_s, double price_per_hour) {
  ServingCost c;
  c.workload = workload;
  c.output_tok_per_s = output_tok_per_s;
  c.tokens_per_hour = output_tok_per_s * 3600.0;
  c.price_per_hour = price_per_hour;
  c.cost_per_m_output = c.tokens_per_hour > 0 ? price_per_hour / (c.tokens_per_hour / 1e6) : 0;
  return c;
}

std::vector<TcoRow> TcoRows(double training_cost, double serving_price_per_hour,
                            const std::vector<double>& serving_hours) {
  std::vector<TcoRow> rows;
  for (double h : serving_hours) rows.push_back({h, training_cost + h * serving_price_per_hour});
  return rows;
}

std::string Dollars(double x) {
  char buf[64];
  // Round half away from zero at the cent, not printf's binary-float rounding.
  const double cents = std::round(x * 100.0);
  std::snprintf(buf, sizeof buf, "%s$%.2f", cents < 0 ? "-" : "", std::fabs(cents) / 100.0);
  return buf;
}

}  // namespace gk::cost
