// The cost arithmetic of the reference case (../shared/paper/FACTS.md §6): hourly rate ×
// measured hours, cost per million tokens, and training + N hours of serving. Pure functions
// of numbers; reading artifacts and the hardware catalog is the caller's job.
#pragma once

#include <string>
#include <vector>

namespace gk::cost {

struct TrainingCost {
  double hours = 0;              // wall-clock hours billed
  double tokens = 0;             // tokens trained (every token of every step, as tok/s × time)
  double price_per_hour = 0;     // $/h of the whole machine
  double cost = 0;               // hours × price
  double cost_per_m_tokens = 0;  // cost ÷ (tokens / 1e6)
};
TrainingCost TrainingCostOf(double hours, double tokens, double price_per_hour);

struct ServingCost {
  std::string workload;          // e.g. "128 in / 256 out, burst"
  double output_tok_per_s = 0;   // sustained output throughput of the whole machine
  double tokens_per_hour = 0;    // output_tok_per_s × 3600
  double price_per_hour = 0;
  double cost_per_m_output = 0;  // price ÷ (tokens_per_hour / 1e6)
};
ServingCost ServingCostOf(const std::string& workload, double output_tok_per_s, double price_per_hour);

struct TcoRow {
  double serving_hours = 0;      // 0 = training only
  double cost = 0;               // training cost + serving_hours × serving price
};
std::vector<TcoRow> TcoRows(double training_cost, double serving_price_per_hour,
                            const std::vector<double>& serving_hours);

// $ rounded to the cent, as a report prints it ("$56.11").
std::string Dollars(double x);

}  // namespace gk::cost
