// The aligned table every subcommand prints for people: a header row, a units row (when
// any column has a unit), then the data rows. Numbers are right-aligned, text
// left-aligned, columns two spaces apart. `--format json` prints the same data as JSON;
// this is only the human rendering.
//
//   Table t({{"model", "", Align::kLeft}, {"params", "B", Align::kRight}});
//   t.add_row({"llama2-7b", fixed(6.74, 2)});
//   std::fputs(t.render().c_str(), stdout);
#pragma once

#include <string>
#include <vector>

namespace rm::cli {

enum class Align { kLeft, kRight };

struct Column {
  std::string header;
  std::string unit;  // shown as "(unit)" under the header; empty for none
  Align align = Align::kRight;
};

class Table {
 public:
  explicit Table(std::vector<Column> columns);
  // One cell per column (asserted).
  void add_row(std::vector<std::string> cells);
  std::string render() const;
  // The same rows as CSV (RFC 4180 quoting), for spreadsheets: one header row whose cells
  // carry the unit, "step (s)", then the data rows.
  std::string csv() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// Number formatting for cells.
std::string fixed(double v, int decimals);  // "12.35"
std::string pct(double fraction);           // a fraction as per cent, one decimal: "12.3"
std::string sig(double v, int digits = 3);  // 3 significant digits: "0.0123", "1.23e+06"

}  // namespace rm::cli
