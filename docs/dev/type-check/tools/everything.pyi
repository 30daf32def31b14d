from typing import Any, Literal, NotRequired, TypedDict
# tools.everything.echo
def echo(*, message: str) -> Any:
    """Echoes back the input string

    Args:
        message: Message to echo"""
# tools.everything.get_sum
def get_sum(*, a: float, b: float) -> Any:
    """Returns the sum of two numbers

    Args:
        a: First number
        b: Second number"""
# tools.everything.get_structured_content
class GetStructuredContentResult(TypedDict):
    conditions: str  # Weather conditions description
    humidity: float  # Humidity percentage
    temperature: float  # Temperature in celsius
def get_structured_content(*, location: Literal["New York", "Chicago", "Los Angeles"]) -> GetStructuredContentResult:
    """Returns structured content along with an output schema for client data validation

    Args:
        location: Choose city"""
# tools.everything.get_annotated_message
def get_annotated_message(*, messageType: Literal["error", "success", "debug"], includeImage: bool | None = None) -> Any:
    """Demonstrates how annotations can be used to provide metadata about content."""
# tools.everything.trigger_long_running_operation
def trigger_long_running_operation(*, duration: float = 10, steps: float = 5) -> Any:
    """Demonstrates a long running operation with progress updates."""
# tools.everything.get_resource_links
def get_resource_links(*, count: float = 3) -> Any:
    """Returns up to ten resource links that reference different types of resources"""
# tools.everything.toggle_simulated_logging
def toggle_simulated_logging() -> Any:
    """Toggles simulated, random-leveled logging on or off."""
# tools.everything.get_tiny_image
def get_tiny_image() -> Any:
    """Returns a tiny MCP logo image."""
