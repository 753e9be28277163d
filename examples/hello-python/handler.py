"""An HTTP function: POST JSON to it, or call it with ?name=..."""


def handle(event):
    query = event["_http"]["query"]
    name = event.get("name") or query.get("name") or "world"
    return {"message": f"hello, {name}!", "path": event["_http"]["path"]}
