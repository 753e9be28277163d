"""A one-shot job: gets its event, prints progress, returns a result."""


def handle(event):
    numbers = event.get("numbers", [])
    print(f"summing {len(numbers)} numbers")
    return {"count": len(numbers), "sum": sum(numbers)}
