fn main() {
    println!("{}", serde_json::to_string_pretty(&tokenops_api::document()).unwrap());
}
