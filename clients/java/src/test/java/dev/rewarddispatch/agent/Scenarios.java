package dev.rewarddispatch.agent;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/** The scenarios every client runs (clients/conformance/scenarios.json). */
final class Scenarios {
  private Scenarios() {}

  static JsonObject load() throws IOException {
    // Maven runs the tests in the project's directory: clients/java.
    Path path = Path.of("..", "conformance", "scenarios.json");
    return JsonParser.parseString(Files.readString(path)).getAsJsonObject();
  }
}
