from typing import Literal
import json
from collections import Counter

CITIES: list[Literal["New York", "Chicago", "Los Angeles"]] = ["New York", "Chicago", "Los Angeles"]


def describe(reading) -> str:
    return f"{reading['temperature']:.1f}C, {reading['conditions']}"


def summarise(readings: dict) -> dict:
    temps = [r["temperature"] for r in readings.values()]
    return {
        "mean": sum(temps) / len(temps),
        "max": max(temps),
        "min": min(temps),
    }


weather = {}
for city in CITIES:
    weather[city] = tools.everything.get_structured_content(locaton=city)

lines = []
for city, reading in weather.items():
    lines.append(f"{city}: {describe(reading)}")

total = 0.0
for i in range(10):
    total = tools.everything.get_sum(a=total, b=i)

echoed = tools.everything.echo(message=json.dumps(lines))
words = Counter(str(echoed).split())
common = words.most_common(3)

stats = summarise(weather)
humid = [c for c, r in weather.items() if r["humidity"] > 50]
report = {
    "stats": stats,
    "humid": humid,
    "total": total,
    "common": common,
}


def render(report: dict) -> str:
    out = []
    for key, value in report.items():
        out.append(f"{key}: {value}")
    return "\n".join(out)


text = render(report)
print(text)
report
