#include "cli/table.h"

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstring>

namespace rm::cli {

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::add_row(std::vector<std::string> cells) {
  assert(cells.size() == columns_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::render() const {
  const size_t n = columns_.size();
  bool any_unit = false;
  std::vector<size_t> width(n, 0);
  for (size_t c = 0; c < n; ++c) {
    width[c] = columns_[c].header.size();
    if (!columns_[c].unit.empty()) {
      any_unit = true;
      width[c] = std::max(width[c], columns_[c].unit.size() + 2);
    }
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < n; ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      if (c > 0) line += "  ";
      line += columns_[c].align == Align::kRight ? pad + cells[c] : cells[c] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  std::vector<std::string> header, units;
  for (const auto& col : columns_) {
    header.push_back(col.header);
    units.push_back(col.unit.empty() ? "" : "(" + col.unit + ")");
  }
  emit(header);
  if (any_unit) emit(units);
  for (const auto& row : rows_) emit(row);
  return out;
}

std::string Table::csv() const {
  auto quote = [](const std::string& cell) {
    if (cell.find_first_of(",\"\n") == std::string::npos) return cell;
    std::string q = "\"";
    for (char ch : cell) {
      if (ch == '"') q += '"';  // a quote doubled
      q += ch;
    }
    return q + "\"";
  };
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) line += ',';
      line += quote(cells[c]);
    }
    return line + "\n";
  };
  std::vector<std::string> header;
  for (const auto& col : columns_) header.push_back(col.unit.empty() ? col.header : col.header + " (" + col.unit + ")");
  std::string out = emit(header);
  for (const auto& row : rows_) out += emit(row);
  return out;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  // A value that rounds to zero reads 0.00, not -0.00 (a replay a hair under its prediction).
  if (buf[0] == '-' && std::strspn(buf + 1, "0.") == std::strlen(buf + 1)) return buf + 1;
  return buf;
}

std::string pct(double fraction) { return fixed(100 * fraction, 1); }

std::string sig(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

}  // namespace rm::cli
